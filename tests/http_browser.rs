//! The dashboard in a real browser: Debian's chromium, headless, driven over
//! WebDriver by chromedriver (fantoccini), against a real server. It opens
//! the dashboard, sees a tube's counts change after puts on the beanstalk
//! port (without a reload), kicks a buried job from the tube page and sees
//! it ready, deletes a state with its confirmation, and saves a screenshot
//! (`target/dashboard.png`, the one in the README). With an embedded Redis
//! bridge it sees the bridge's timer tube apart from the user's tubes, left
//! out of the totals, and the bridge card; and it checks the page's pure
//! helpers (round axis ticks, units) by calling them in the page.

mod bridge_common;
mod common;
mod http_client;

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Client, TempDir, TestServer};
use fantoccini::{ClientBuilder, Locator};
use http_client::{program, start};
use serde_json::{json, Value};

/// chromedriver on a free port, killed on drop.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromedriver(path: &std::path::Path) -> (Driver, u16) {
    let port = TestServer::free_port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (driver, port)
}

/// Waits (up to 15 s) until the JavaScript expression `condition` is true.
async fn until(browser: &fantoccini::Client, condition: &str) {
    let script = format!("try {{ return !!({condition}); }} catch (e) {{ return false; }}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let value = browser.execute(&script, vec![]).await.expect("script runs");
        if value == Value::Bool(true) {
            return;
        }
        if Instant::now() > deadline {
            let page = browser.source().await.unwrap_or_default();
            panic!("never true: {condition}\npage:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn click(browser: &fantoccini::Client, css: &str) {
    let element = browser
        .wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    element
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

fn text_is(css: &str, text: &str) -> String {
    format!(
        "document.querySelector({:?}).textContent.trim() === {text:?}",
        css
    )
}

fn put_in(c: &mut Client, tube: &str, n: usize) -> Vec<u64> {
    assert_eq!(c.line(&format!("use {tube}")), format!("USING {tube}"));
    (0..n)
        .map(|i| {
            c.put_with(
                100,
                0,
                60,
                format!("{{\"to\":\"user{i}@example.com\"}}").as_bytes(),
            )
        })
        .collect()
}

/// A headless chromium driven through chromedriver (both kept alive by
/// the returned guards), or `None` when they are not installed.
async fn browser() -> Option<(fantoccini::Client, Driver, TempDir)> {
    let (Some(chromium), Some(driver_path)) = (program("chromium"), program("chromedriver")) else {
        return None;
    };
    let (driver, driver_port) = chromedriver(&driver_path);
    let profile = TempDir::new();
    let options = json!({
        "binary": chromium,
        "args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--window-size=1280,1000",
            format!("--user-data-dir={}", profile.path().display()),
        ],
    });
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("goog:chromeOptions".into(), options);
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let browser = ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .expect("a WebDriver session");
    Some((browser, driver, profile))
}

/// The value of the JavaScript expression `expression` in the page.
async fn eval(browser: &fantoccini::Client, expression: &str) -> Value {
    let script = format!("return {expression};");
    (browser.execute(&script, vec![]).await).unwrap_or_else(|e| panic!("{expression}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_in_a_real_browser() {
    if !common::sprout_only("the_dashboard_in_a_real_browser") {
        return;
    }
    let Some((browser, _driver, _profile)) = browser().await else {
        return;
    };
    let (server, http) = start(&[]);

    // 1. The dashboard lists the tubes.
    browser.goto(&format!("{}/", http.base)).await.unwrap();
    until(
        &browser,
        "document.querySelector('tr[data-tube=\"default\"]')",
    )
    .await;
    browser
        .execute("window.notReloaded = true;", vec![])
        .await
        .unwrap();

    // 2. Puts on the beanstalk port show up within a second or two.
    let mut c = server.connect();
    let ids = put_in(&mut c, "emails", 3);
    put_in(&mut c, "reports", 2);
    until(&browser, &text_is("tr[data-tube=\"emails\"] td.ready", "3")).await;
    until(
        &browser,
        &text_is("tr[data-tube=\"reports\"] td.ready", "2"),
    )
    .await;
    let kept = browser
        .execute("return window.notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(kept, Value::Bool(true), "updated in place, not reloaded");

    // 3. Bury one, kick it from the tube page, see it ready.
    c.line("watch emails");
    c.send(b"reserve\r\n");
    let first = c.expect_reserved(b"{\"to\":\"user0@example.com\"}");
    assert_eq!(first, ids[0]);
    assert_eq!(c.line(&format!("bury {first} 100")), "BURIED");
    click(&browser, "tr[data-tube=\"emails\"] td a").await;
    until(&browser, &text_is("#tube-name", "emails")).await;
    until(&browser, &text_is("#tube-buried b", "1 job")).await;
    click(&browser, "#state-tabs button[data-state=\"buried\"]").await;
    let row = format!("tr[data-job=\"{first}\"]");
    until(
        &browser,
        &format!("document.querySelector('{}')", row.replace('\'', "\\'")),
    )
    .await;
    click(&browser, &format!("{row} button.kick")).await;
    until(&browser, &text_is("#tube-buried b", "0 jobs")).await;
    until(&browser, &text_is("#tube-ready b", "3 jobs")).await;
    assert_eq!(c.job_stat(first, "state"), "ready");
    click(&browser, "#state-tabs button[data-state=\"ready\"]").await;
    until(
        &browser,
        &format!("document.querySelector('tr[data-job=\"{first}\"]')"),
    )
    .await;

    // 4. Deleting a whole state asks first; cancel keeps, confirm deletes.
    click(&browser, "#flush-state").await;
    until(&browser, "document.querySelector('#confirm').open").await;
    click(&browser, "#confirm button[value=\"cancel\"]").await;
    until(&browser, "!document.querySelector('#confirm').open").await;
    assert_eq!(c.tube_stat("emails", "current-jobs-ready"), "3");
    click(&browser, "#flush-state").await;
    click(&browser, "#confirm-ok").await;
    until(&browser, &text_is("#tube-ready b", "0 jobs")).await;
    assert_eq!(c.tube_stat("emails", "current-jobs-ready"), "0");

    // 5. The job page: delay and ttr with units, time left only where a
    // clock runs (none for a ready job; until ready for a delayed one).
    let ready = put_in(&mut c, "later", 1)[0];
    browser
        .goto(&format!("{}/#/job/{ready}", http.base))
        .await
        .unwrap();
    until(&browser, &text_is("#job-ttr", "60 s")).await;
    until(&browser, &text_is("#job-delay", "0 s")).await;
    assert_eq!(
        eval(&browser, "!!document.querySelector('#job-time_left')").await,
        false
    );
    let delayed = c.put_with(100, 300, 60, b"later");
    browser
        .goto(&format!("{}/#/job/{delayed}", http.base))
        .await
        .unwrap();
    until(&browser, &text_is("#job-delay", "300 s")).await;
    let left = "document.querySelector('#job-time_left')";
    until(
        &browser,
        &format!("/^\\d+\\.\\d min$/.test({left}.textContent)"),
    )
    .await;
    let label = eval(
        &browser,
        &format!("{left}.previousElementSibling.textContent"),
    )
    .await;
    assert_eq!(label, "ready in");

    // 6. Back to the overview, with traffic for a few seconds, and a screenshot.
    browser.goto(&format!("{}/#/", http.base)).await.unwrap();
    let port = server.port();
    let traffic = std::thread::spawn(move || {
        let mut c = Client::tcp(port);
        for round in 0..5 {
            put_in(&mut c, "emails", 20 + 10 * round);
            put_in(&mut c, "thumbnails", 5);
            c.line("watch emails");
            for _ in 0..15 + 5 * round {
                c.send(b"reserve\r\n");
                let line = c.expect_line();
                let mut words = line.split(' ').skip(1);
                let id: u64 = words.next().unwrap().parse().unwrap();
                let len: usize = words.next().unwrap().parse().unwrap();
                c.read_exact_bytes(len + 2);
                assert_eq!(c.line(&format!("delete {id}")), "DELETED");
            }
            std::thread::sleep(Duration::from_millis(900));
        }
    });
    until(
        &browser,
        "document.querySelector('tr[data-tube=\"thumbnails\"]')",
    )
    .await;
    tokio::task::spawn_blocking(move || traffic.join().unwrap())
        .await
        .unwrap();
    until(
        &browser,
        &text_is("tr[data-tube=\"thumbnails\"] td.ready", "25"),
    )
    .await;
    // The throughput axis ticks on round numbers, in jobs/s.
    let labels = eval(
        &browser,
        "document.querySelector('#chart-rate').dataset.ticks",
    )
    .await;
    assert_round_ticks(labels.as_str().expect("ticks drawn"), " jobs/s");
    let png = browser.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
    let path = std::path::Path::new(&target).join("dashboard.png");
    std::fs::write(&path, &png).expect("screenshot saved");
    eprintln!("screenshot: {}", path.display());
    pure_helpers(&browser).await;
    browser.close().await.unwrap();
}

/// `labels` ("0 jobs/s|20 jobs/s|…"): from 0 in steps of 1, 2 or 5 × 10^n,
/// each with `unit`.
fn assert_round_ticks(labels: &str, unit: &str) {
    let values: Vec<f64> = labels
        .split('|')
        .map(|label| {
            let number = label
                .strip_suffix(unit)
                .unwrap_or_else(|| panic!("{labels}"));
            number
                .replace(',', "")
                .parse()
                .unwrap_or_else(|_| panic!("{labels}"))
        })
        .collect();
    assert!(values.len() >= 2 && values[0] == 0.0, "{labels}");
    let step = values[1];
    let mantissa = step / 10f64.powf(step.log10().floor());
    assert!(
        [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
        "{labels}"
    );
    for (i, v) in values.iter().enumerate() {
        assert!((v - i as f64 * step).abs() < step * 1e-9, "{labels}");
    }
}

/// The page's pure helpers, called in the page: (expression, its value).
async fn pure_helpers(browser: &fantoccini::Client) {
    let table = [
        ("niceStep(0.9)", json!(1)),
        ("niceStep(1.1)", json!(2)),
        ("niceStep(2.2)", json!(5)),
        ("niceStep(88)", json!(100)),
        ("niceStep(0.000205)", json!(0.0005)),
        ("ticks(352).values", json!([0, 100, 200, 300, 400])),
        ("ticks(7).values", json!([0, 2, 4, 6, 8])),
        ("ticks(1).values", json!([0, 0.5, 1])),
        ("ticks(0.00082).values", json!([0, 0.0005, 0.001])),
        ("tickLabel(0.5, 0.5, 'ms')", json!("0.5 ms")),
        ("tickLabel(1000, 500, 'jobs/s')", json!("1,000 jobs/s")),
        ("tickLabel(0.0005, 0.0005, 's')", json!("0.0005 s")),
        ("tickLabel(40, 20, 's')", json!("40 s")),
        ("timeAxis(0.00082)", json!({"unit": "ms", "scale": 1000})),
        ("timeAxis(30)", json!({"unit": "s", "scale": 1})),
        ("timeAxis(600)", json!({"unit": "min", "scale": 1.0 / 60.0})),
        ("duration(0)", json!("0 µs")),
        ("duration(0.00082)", json!("820 µs")),
        ("duration(0.0082)", json!("8.2 ms")),
        ("duration(0.45)", json!("450 ms")),
        ("duration(1.5)", json!("1.5 s")),
        ("duration(300)", json!("5.0 min")),
        ("plural(1, 'job')", json!("1 job")),
        ("plural(1200, 'job')", json!("1,200 jobs")),
        ("wholeSeconds(60)", json!("60 s")),
        ("bytes(1536)", json!("1.5 KiB")),
        (
            "userTotals({current_jobs_delayed: 5, version: '1'}, {tubes: ['t'], current_jobs_delayed: 2})",
            json!({"current_jobs_delayed": 3, "version": "1"}),
        ),
        (
            "jobRows({state: 'ready', delay: 0, ttr: 60, time_left: 0}).map((r) => r[2])",
            json!(["state", "pri", "age", "delay", "ttr", "size", "reserves", "timeouts", "releases", "buries", "kicks"]),
        ),
        (
            "jobRows({state: 'reserved', time_left: 12}).find((r) => r[2] === 'time_left')",
            json!(["TTR ends in", "12.0 s", "time_left"]),
        ),
        ("bridgeCards(null, {tubes: []})", json!([])),
        (
            "bridgeCards(null, {tubes: ['bridge-timers.x'], current_jobs_delayed: 4, \
             current_jobs_ready: 1, current_jobs_reserved: 0})",
            json!([
                ["timers pending", "5 jobs", "bridge-timers"],
                ["timer tubes", "bridge-timers.x", "bridge-tubes"],
            ]),
        ),
        (
            "bridgeCards({keys: 7, timers_pending: 7, window_s: 300, deliveries: 1200, \
             lateness_p50_ms: 1.5, lateness_p99_ms: null}, {tubes: ['bridge-timers.x']})",
            json!([
                ["keys tracked", "7", "bridge-keys"],
                ["timers pending", "7 jobs", "bridge-timers"],
                ["deliveries (last 5 min)", "1,200 jobs", "bridge-deliveries"],
                ["lateness p50 (last 5 min)", "1.5 ms", "bridge-p50"],
                ["lateness p99 (last 5 min)", "–", "bridge-p99"],
                ["timer tubes", "bridge-timers.x", "bridge-tubes"],
            ]),
        ),
    ];
    for (expression, expected) in table {
        assert_eq!(eval(browser, expression).await, expected, "{expression}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_apart_in_a_real_browser() {
    if !bridge_common::can_run("the_bridge_apart_in_a_real_browser") {
        return;
    }
    let Some((browser, _driver, _profile)) = browser().await else {
        return;
    };
    let redis = bridge_common::Redis::start();
    let url = redis.url();
    let dir = TempDir::new();
    let args = [
        "-b",
        dir.path().to_str().unwrap(),
        "--redis-bridge",
        &url,
        "--bridge-tube",
        "expired",
        "--bridge-match",
        "session:*",
    ];
    let (server, http) = start(&args);
    redis.set_px("session:1", "x", 600_000);
    redis.set_px("session:2", "x", 600_000);
    let mut c = server.connect();
    assert_eq!(c.line("use emails"), "USING emails");
    c.put_with(100, 300, 60, b"a user's delayed job");

    browser.goto(&format!("{}/", http.base)).await.unwrap();
    // The bridge card: the keys it tracks and the timers they armed.
    until(&browser, &text_is("#bridge-timers b", "2 jobs")).await;
    until(&browser, &text_is("#bridge-keys b", "2")).await;
    until(
        &browser,
        &text_is("#bridge-tubes b", "bridge-timers.expired"),
    )
    .await;
    // The timer tube in its own table, not among the user's tubes.
    let timer_row = "tr[data-tube=\"bridge-timers.expired\"]";
    until(
        &browser,
        &format!("document.querySelector('#timer-tubes {timer_row}')"),
    )
    .await;
    assert_eq!(
        eval(
            &browser,
            &format!("!!document.querySelector('#tubes {timer_row}')")
        )
        .await,
        false
    );
    until(
        &browser,
        "document.querySelector('#tubes tr[data-tube=\"emails\"]')",
    )
    .await;
    let columns = "document.querySelectorAll('#timer-tubes thead th').length";
    assert_eq!(eval(&browser, columns).await, 13, "the tubes' columns");
    // The totals are the user's: one delayed job put, one producer, no
    // worker, though the server counts the bridge's timers and sessions.
    assert_eq!(c.stat("current-jobs-delayed"), "3");
    assert_eq!(c.stat("total-jobs"), "3");
    assert!(c.stat("current-workers").parse::<u32>().unwrap() > 0);
    until(&browser, &text_is("#total-delayed b", "1 job")).await;
    until(&browser, &text_is("#total-put b", "1 job")).await;
    until(&browser, &text_is("#total-tubes b", "3")).await;
    let line = eval(
        &browser,
        "document.querySelector('#server-line').textContent",
    )
    .await;
    let line = line.as_str().unwrap();
    assert!(line.contains(" · 0 workers · 1 producer · "), "{line}");
    // A key that expires: one delivery, and its lateness on the card.
    redis.set_px("session:3", "x", 300);
    until(&browser, &text_is("#bridge-deliveries b", "1 job")).await;
    until(
        &browser,
        "/^[0-9.]+ (µs|ms|s)$/.test(document.querySelector('#bridge-p50 b').textContent)",
    )
    .await;
    let label = eval(
        &browser,
        "document.querySelector('#bridge-p50 span').textContent",
    )
    .await;
    assert_eq!(label, "lateness p50 (last 5 min)");
    browser.close().await.unwrap();
}
