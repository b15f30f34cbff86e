//! Puts a few jobs: urgent ones first, some delayed, one that will fail.
//!
//! ```sh
//! cargo run --release &                     # a server on 127.0.0.1:11300
//! cargo run --example producer -- 127.0.0.1:11300
//! cargo run --example worker -- 127.0.0.1:11300
//! ```

use std::time::Duration;

use sprout::client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:11300".into());
    let mut client = Client::connect(addr.as_str()).await?;
    client.use_tube("emails").await?;

    let ttr = Duration::from_secs(30);
    let jobs: [(u32, f64, &str); 4] = [
        (1024, 0.0, "welcome mail for ada"),
        (10, 0.0, "password reset for bob"), // lower priority number: served first
        (1024, 1.5, "reminder for carol"),   // delayed by a second and a half
        (1024, 0.0, "poison: this one always fails"),
    ];
    for (pri, delay, body) in jobs {
        let put = client
            .put(pri, Duration::from_secs_f64(delay), ttr, body.to_owned())
            .await?;
        println!("put job {} (pri {pri}, delay {delay}s): {body}", put.id());
    }
    Ok(())
}
