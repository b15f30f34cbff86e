//! The dashboard in a real browser: Debian's chromium, headless, driven over
//! WebDriver by chromedriver (fantoccini), against a real server. It opens
//! the dashboard, sees a tube's counts change after puts on the beanstalk
//! port (without a reload), kicks a buried job from the tube page and sees
//! it ready, deletes a state with its confirmation, and saves a screenshot
//! (`target/dashboard.png`, the one in the README).

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

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_in_a_real_browser() {
    if !common::sprout_only("the_dashboard_in_a_real_browser") {
        return;
    }
    let (Some(chromium), Some(driver_path)) = (program("chromium"), program("chromedriver")) else {
        return;
    };
    let (server, http) = start(&[]);
    let (_driver, driver_port) = chromedriver(&driver_path);
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
    until(&browser, &text_is("#tube-buried b", "1")).await;
    click(&browser, "#state-tabs button[data-state=\"buried\"]").await;
    let row = format!("tr[data-job=\"{first}\"]");
    until(
        &browser,
        &format!("document.querySelector('{}')", row.replace('\'', "\\'")),
    )
    .await;
    click(&browser, &format!("{row} button.kick")).await;
    until(&browser, &text_is("#tube-buried b", "0")).await;
    until(&browser, &text_is("#tube-ready b", "3")).await;
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
    until(&browser, &text_is("#tube-ready b", "0")).await;
    assert_eq!(c.tube_stat("emails", "current-jobs-ready"), "0");

    // 5. Back to the overview, with traffic for a few seconds, and a screenshot.
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
    let png = browser.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
    let path = std::path::Path::new(&target).join("dashboard.png");
    std::fs::write(&path, &png).expect("screenshot saved");
    eprintln!("screenshot: {}", path.display());
    browser.close().await.unwrap();
}
