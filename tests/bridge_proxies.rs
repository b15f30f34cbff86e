//! The Redis TTL bridge and proxies: a twemproxy (Debian's `nutcracker`)
//! in front of two redis-servers. The bridge watches the backends, read
//! from the proxy's YAML (`--twemproxy-config`), and delivers every expiry
//! of keys written through the proxy, once, on time; pointed at the proxy
//! itself, it says at start which commands the proxy refuses and stops.

mod bridge_common;
mod common;

use std::time::Duration;

use bridge_common::{
    assert_each_once, bridge_args_for, bridge_exit, can_run, keys_to_write, write_keys, Bridge,
    Nutcracker, Redis, Worker,
};
use common::{tool_available, TempDir, TestServer};

/// Lateness allowed: generous, for a loaded CI machine (the printed p99 is
/// the figure).
const MAX_LATE_MS: i64 = 500;

fn can_run_proxy(test: &str) -> bool {
    can_run(test) && tool_available("nutcracker", test)
}

#[test]
fn expiries_of_keys_written_through_twemproxy_are_delivered_once() {
    if !can_run_proxy("expiries_of_keys_written_through_twemproxy_are_delivered_once") {
        return;
    }
    let backends = [Redis::start(), Redis::start()];
    let proxy = Nutcracker::start(&[&backends[0], &backends[1]]);
    let server = TestServer::start(&[]);
    let state = TempDir::new();
    let config = proxy.config().display().to_string();
    let args = bridge_args_for(
        &["--twemproxy-config", &config],
        server.port(),
        state.path(),
    );
    let mut bridge = Bridge::start(&args);
    for b in &backends {
        bridge.wait_log(&format!(
            "redis://127.0.0.1:{}/0 (twemproxy backend)",
            b.port
        ));
    }
    let mut worker = Worker::new(server.port(), "offline");
    let mut through = redis::Client::open(proxy.url())
        .and_then(|c| c.get_connection())
        .expect("connect through the proxy");
    let n = keys_to_write(2_000);
    let want = write_keys(&mut through, "proxied", n, 1_000, 2_000);
    // The proxy spread them over both backends.
    for b in &backends {
        let keys: i64 = b.run(&["DBSIZE"]);
        assert!(keys > 0, "a backend got no key");
    }
    let got = worker.drain(Duration::from_millis(1_500));
    assert_each_once("twemproxy, 2 backends", &got, &want, MAX_LATE_MS, 0);
}

#[test]
fn pointed_at_twemproxy_itself_the_bridge_names_what_it_refuses() {
    if !can_run_proxy("pointed_at_twemproxy_itself_the_bridge_names_what_it_refuses") {
        return;
    }
    let backend = Redis::start();
    let proxy = Nutcracker::start(&[&backend]);
    let server = TestServer::start(&[]);
    for extra in [&[][..], &["--no-pubsub"][..]] {
        let state = TempDir::new();
        let url = proxy.url();
        let mut args = bridge_args_for(&["--redis", &url], server.port(), state.path());
        args.extend(extra.iter().map(|s| s.to_string()));
        let (status, log) = bridge_exit(&args);
        assert!(!status.success(), "{log}");
        assert!(log.contains(&format!("{url} refuses SCAN")), "{log}");
        assert!(log.contains("--twemproxy-config"), "{log}");
        // What it refused, by name, once: not a loop of retries.
        assert!(log.contains("CONFIG") && log.contains("INFO"), "{log}");
        assert_eq!(log.matches("refuses").count(), 1, "{log}");
    }
}
