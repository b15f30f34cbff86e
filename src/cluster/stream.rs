//! The cluster's stream: made if absent, refused if its settings could
//! drop a live page.
//!
//! Limits that age out or cap messages (`max_age`, `max_msgs`,
//! `max_bytes`, more than one message per subject kept or fewer) would let
//! JetStream drop a page that still holds live jobs, or keep superseded
//! ones forever; memory storage does not survive the loss of the servers;
//! a batch must be stored whole or not at all (`allow_atomic`).

use async_nats::jetstream::stream::{Config, DiscardPolicy, StorageType};
use async_nats::jetstream::Context;

use super::subjects::Subjects;

/// The stream a cluster wants, with `replicas` copies.
pub fn wanted(subjects: &Subjects, replicas: usize) -> Config {
    Config {
        name: subjects.stream(),
        subjects: vec![subjects.all()],
        storage: StorageType::File,
        num_replicas: replicas,
        max_messages_per_subject: 1,
        discard: DiscardPolicy::Old,
        allow_atomic_publish: true,
        allow_direct: true,
        ..Default::default()
    }
}

/// A stream whose settings could lose jobs: its name, and each setting
/// that could.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the stream {name} could lose jobs: {}", wrong.join("; "))]
pub struct Unsafe {
    pub name: String,
    pub wrong: Vec<String>,
}

/// Why a stream's settings could lose jobs, if they could.
pub fn check(config: &Config, subjects: &Subjects) -> Result<(), Unsafe> {
    let mut wrong = Vec::new();
    if !config.subjects.contains(&subjects.all()) {
        wrong.push(format!("its subjects do not include {}", subjects.all()));
    }
    if config.storage != StorageType::File {
        wrong.push("it is kept in memory, not in files".to_string());
    }
    if !config.max_age.is_zero() {
        wrong.push(format!(
            "max_age {:?} would drop live pages",
            config.max_age
        ));
    }
    if config.max_messages > 0 {
        wrong.push(format!(
            "max_msgs {} would drop live pages",
            config.max_messages
        ));
    }
    if config.max_bytes > 0 {
        wrong.push(format!(
            "max_bytes {} would drop live pages",
            config.max_bytes
        ));
    }
    if config.max_messages_per_subject != 1 {
        wrong.push(format!(
            "max_msgs_per_subject is {}, not 1",
            config.max_messages_per_subject
        ));
    }
    if config.discard_new_per_subject {
        wrong.push("discard_new_per_subject would refuse a page's update".to_string());
    }
    if !config.allow_atomic_publish {
        wrong.push("allow_atomic is off".to_string());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Unsafe {
            name: config.name.clone(),
            wrong,
        })
    }
}

/// Why the stream (or the lease bucket) could not be had.
#[derive(Debug)]
pub enum Trouble {
    /// NATS did not answer in time (a cluster still starting, an
    /// election): worth trying again.
    Passing(String),
    /// Its settings could lose jobs: a person must look.
    Refused(String),
}

/// Makes the stream if it is absent; refuses one whose settings could lose
/// jobs.
pub async fn ensure(
    js: &Context,
    subjects: &Subjects,
    replicas: usize,
) -> Result<async_nats::jetstream::stream::Stream, Trouble> {
    let name = subjects.stream();
    let mut stream = match js.get_stream(&name).await {
        Ok(stream) => stream,
        Err(_) => js
            .get_or_create_stream(wanted(subjects, replicas))
            .await
            .map_err(|e| Trouble::Passing(format!("cannot create the stream {name}: {e}")))?,
    };
    let info = stream
        .info()
        .await
        .map_err(|e| Trouble::Passing(format!("cannot read the stream {name}: {e}")))?;
    check(&info.config, subjects).map_err(|e| Trouble::Refused(e.to_string()))?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_settings_that_keep_every_page_pass() {
        let s = Subjects::new("c").unwrap();
        assert_eq!(check(&wanted(&s, 3), &s), Ok(()));
        type Change = fn(&mut Config);
        let cases: [(&str, Change); 8] = [
            ("subjects", |c| c.subjects = vec!["other.>".into()]),
            ("memory", |c| c.storage = StorageType::Memory),
            ("max_age", |c| c.max_age = Duration::from_secs(3600)),
            ("max_msgs", |c| c.max_messages = 1000),
            ("max_bytes", |c| c.max_bytes = 1 << 30),
            ("max_msgs_per_subject", |c| c.max_messages_per_subject = 5),
            ("discard_new_per_subject", |c| {
                c.discard_new_per_subject = true
            }),
            ("allow_atomic", |c| c.allow_atomic_publish = false),
        ];
        for (what, change) in cases {
            let mut config = wanted(&s, 3);
            change(&mut config);
            let err = check(&config, &s).unwrap_err().to_string();
            assert!(err.contains(what), "{what}: {err}");
        }
    }
}
