//! Watching for what wipes keys without a keyspace event: `FLUSHDB`,
//! `FLUSHALL` and `SWAPDB` announce nothing per key, and a Redis restarted
//! without its data loses every key silently (with `--no-pubsub` nothing
//! else would notice). Each node is asked `INFO server commandstats` once
//! a [`POLL`]: a change in the calls of those three commands, or in
//! `run_id`, triggers a reconciliation at once, whose complete pass
//! cancels every key that vanished (see `reconcile`). Deadlines since the
//! poll before the change are marked uncertain until it is done.
//!
//! Why polling and not an event: the one message Redis sends for a flush
//! is a client-tracking invalidation (checked on 7.0: a null one, for a
//! flush of any database), which needs a connection kept in tracking mode
//! (RESP3, or redirected to a pub/sub one, so not behind a proxy) and says
//! nothing of `SWAPDB` or a restart. The counters are not per database, so a flush
//! of another database of the node costs one needless pass. A node that
//! refuses `INFO` (some proxies) is said so once, and left to
//! `--scan-interval`.

use std::time::Duration;

use super::redis_side::Redis;
use super::triggers::Triggers;
use super::wall_clock::now_ms;

/// How often each node is asked: the longest an unannounced wipe waits
/// before its reconciliation starts.
pub const POLL: Duration = Duration::from_millis(500);

/// What tells one wipe (or restart) from the next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    run_id: String,
    /// Calls of FLUSHDB, FLUSHALL and SWAPDB since the last start (or
    /// `CONFIG RESETSTAT`, which also counts as a change).
    wipes: u64,
}

impl Stamp {
    /// From the text of `INFO server commandstats`.
    pub fn parse(info: &str) -> Stamp {
        let mut stamp = Stamp::default();
        for line in info.lines() {
            let line = line.trim_end();
            if let Some(id) = line.strip_prefix("run_id:") {
                stamp.run_id = id.to_owned();
            }
            for command in ["flushdb", "flushall", "swapdb"] {
                let calls = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.strip_prefix(command))
                    .and_then(|l| l.strip_prefix(":calls="))
                    .and_then(|l| l.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok());
                stamp.wipes += calls.unwrap_or(0);
            }
        }
        stamp
    }
}

/// Watches node `node` forever.
pub async fn run(node: u16, mut redis: Redis, triggers: Triggers) {
    // The last answer, and the time just before it was asked for: a wipe
    // it does not count came after that time.
    let mut last: Option<(Stamp, i64)> = None;
    let mut refused = false;
    let mut switches = redis.switches();
    loop {
        if switches.has_changed().unwrap_or(false) {
            // Another node now (a failover): its run_id and counters are
            // its own, not a wipe.
            switches.borrow_and_update();
            last = None;
        }
        let asked_ms = now_ms();
        match redis.info("server commandstats").await {
            Ok(info) => {
                let stamp = Stamp::parse(&info);
                if let Some((before, before_ms)) = &last {
                    if *before != stamp {
                        tracing::info!(
                            node,
                            "keys wiped without events (flush, swap or restart); reconciling"
                        );
                        triggers.missed(node, *before_ms);
                    }
                }
                last = Some((stamp, asked_ms));
                refused = false;
            }
            Err(e) => {
                if !refused {
                    tracing::warn!(
                        node,
                        error = %e,
                        "cannot watch for FLUSHDB/FLUSHALL (INFO): keys they wipe are \
                         only seen by SCAN every --scan-interval"
                    );
                }
                refused = true;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c\r\ntcp_port:6379\r\n\r\n\
        # Commandstats\r\ncmdstat_set:calls=7,usec=9,usec_per_call=1.29,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_flushdb:calls=2,usec=30,usec_per_call=15.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_flushall:calls=1,usec=12,usec_per_call=12.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_client|list:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn wipes_and_restarts_change_the_stamp() {
        let stamp = Stamp::parse(INFO);
        assert_eq!(
            stamp,
            Stamp {
                run_id: "4f1c".into(),
                wipes: 3
            }
        );
        let swapped = format!("{INFO}cmdstat_swapdb:calls=1,usec=1\r\n");
        assert_eq!(Stamp::parse(&swapped).wipes, 4);
        let restarted = INFO.replace("run_id:4f1c", "run_id:77aa");
        assert_ne!(Stamp::parse(&restarted), stamp);
        // Other commands, however busy, change nothing.
        let busy = INFO.replace("cmdstat_set:calls=7", "cmdstat_set:calls=7000");
        assert_eq!(Stamp::parse(&busy), stamp);
        // A server that never flushed has no such lines.
        assert_eq!(Stamp::parse("run_id:1\r\n").wipes, 0);
    }
}
