//! A worker: reserves jobs, deletes the ones it finishes, releases a failed
//! job with a growing delay, buries a job that keeps failing, and at the end
//! kicks the buried jobs back so an operator's fix can be retried.
//!
//! Run it after `examples/producer.rs`; it stops once the tube stays empty
//! for three seconds.

use std::time::Duration;

use sprout::client::{Client, Job};
use sprout_protocol::Command;

/// Tries before a job is buried.
const MAX_RELEASES: u32 = 3;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:11300".into());
    let mut client = Client::connect(addr.as_str()).await?;
    client.watch("emails").await?;
    client.ignore("default").await?;

    while let Some(job) = client.reserve_with_timeout(Duration::from_secs(3)).await? {
        let text = String::from_utf8_lossy(&job.body).into_owned();
        match process(&text) {
            Ok(()) => {
                client.delete(job.id).await?;
                println!("job {}: done ({text})", job.id);
            }
            Err(why) => retry_or_bury(&mut client, &job, why).await?,
        }
    }

    client.use_tube("emails").await?;
    let kicked = client.kick(100).await?;
    println!("queue empty; kicked {kicked} buried job(s) back to ready for another try");
    Ok(())
}

fn process(text: &str) -> Result<(), &'static str> {
    if text.starts_with("poison") {
        Err("cannot render template")
    } else {
        Ok(())
    }
}

async fn retry_or_bury<S>(
    client: &mut Client<S>,
    job: &Job,
    why: &str,
) -> sprout::client::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let stats = client.stats(&Command::StatsJob(job.id)).await?;
    let releases: u32 = stats
        .get("releases")
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    if releases >= MAX_RELEASES {
        client.bury(job.id, 0).await?;
        println!("job {}: {why}; buried after {releases} retries", job.id);
    } else {
        // Back off: 0.25 s, 0.5 s, 1 s (sprout takes fractional delays).
        let delay = Duration::from_millis(250 << releases);
        client.release(job.id, 1024, delay).await?;
        println!("job {}: {why}; retry in {delay:?}", job.id);
    }
    Ok(())
}
