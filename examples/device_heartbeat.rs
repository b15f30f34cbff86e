//! Device heartbeats through the Redis TTL bridge: three simulated devices
//! refresh `device:N` with `SET … EX 2` every half second; one of them
//! stops after three seconds, and its "device offline" job arrives when
//! its last heartbeat lapses, two seconds later. The others never fire.
//!
//! ```sh
//! redis-server --port 6379 &
//! cargo run --release -- -b ./sprout-data \
//!     --redis-bridge redis://127.0.0.1:6379/0 \
//!     --bridge-tube offline --bridge-match 'device:*' &
//! cargo run --example device_heartbeat -- redis://127.0.0.1:6379/0 127.0.0.1:11300
//! ```
//!
//! (or run `sprout bridge --redis … --server … --tube offline --match
//! 'device:*' --state-dir …` next to a plain server).

use std::time::{Duration, Instant};

use sprout::bridge::now_ms;
use sprout::client::Client;

const DEVICES: u32 = 3;
const STOPPING: u32 = 2;
const HEARTBEAT: Duration = Duration::from_millis(500);
const TTL_SECS: u64 = 2;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let redis_url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/0".into());
    let server = args.next().unwrap_or_else(|| "127.0.0.1:11300".into());

    let redis = redis::Client::open(redis_url)?;
    let conn = redis.get_multiplexed_async_connection().await?;
    for device in 1..=DEVICES {
        tokio::spawn(heartbeat(conn.clone(), device));
    }

    let mut worker = Client::connect(server.as_str()).await?;
    worker.watch("offline").await?;
    let started = Instant::now();
    println!("{DEVICES} devices heartbeating; device {STOPPING} stops after 3 s");
    while started.elapsed() < Duration::from_secs(8) {
        let Some(job) = worker.reserve_with_timeout(Duration::from_secs(1)).await? else {
            continue;
        };
        let body: serde_json::Value = serde_json::from_slice(&job.body)?;
        let late = now_ms() - body["expire_at_ms"].as_i64().unwrap_or(0);
        println!(
            "device offline: {} (at {:.1} s, {late} ms after its TTL ran out)",
            body["key"].as_str().unwrap_or("?"),
            started.elapsed().as_secs_f64()
        );
        worker.delete(job.id).await?;
    }
    Ok(())
}

/// Refreshes `device:N` every [`HEARTBEAT`]; device [`STOPPING`] stops
/// after three seconds.
async fn heartbeat(mut conn: redis::aio::MultiplexedConnection, device: u32) {
    let started = Instant::now();
    let key = format!("device:{device}");
    while device != STOPPING || started.elapsed() < Duration::from_secs(3) {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(&key)
            .arg("online")
            .arg("EX")
            .arg(TTL_SECS)
            .query_async(&mut conn)
            .await;
        if let Err(e) = set {
            eprintln!("{key}: heartbeat failed: {e}");
        }
        tokio::time::sleep(HEARTBEAT).await;
    }
    println!("{key} stopped heartbeating");
}
