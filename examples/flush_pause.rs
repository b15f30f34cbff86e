//! How long the HTTP port's heaviest calls hold up the beanstalk port's
//! clients: buries N jobs in `default` and flushes them over HTTP (or, with
//! `scrape`, leaves N jobs ready and scrapes `/metrics` ten times, which
//! scans the ready jobs for the oldest), while a probe client times one
//! round trip after another, and prints what it saw.
//!
//! `cargo run --release --example flush_pause -- ADDR HTTP_ADDR [JOBS [scrape]]`
//! against `sprout -p PORT --http HTTP_ADDR [-b DIR]` (JOBS: 1000000).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:11300".into());
    let http = args.next().unwrap_or_else(|| "127.0.0.1:11380".into());
    let jobs: u64 = args.next().map_or(Ok(1_000_000), |n| n.parse())?;
    let scrape = args.next().is_some_and(|mode| mode == "scrape");

    let started = Instant::now();
    let first = fill(&addr, jobs, !scrape)?;
    eprintln!(
        "{jobs} jobs in (ids from {first}) in {:?}",
        started.elapsed()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let probe = {
        let (addr, stop, log) = (addr.clone(), stop.clone(), log.clone());
        std::thread::spawn(move || probe(&addr, &stop, &log))
    };
    // The same probe with nothing else going on, for comparison: on a
    // shared machine, scheduling alone makes some round trips slow.
    std::thread::sleep(Duration::from_secs(2));
    report("quiet, 2 s", std::mem::take(&mut *log.lock().unwrap()));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(3600)))
        .build()
        .into();
    let call_started = Instant::now();
    let answer = if scrape {
        let mut size = 0;
        for _ in 0..10 {
            let mut response = agent.get(format!("http://{http}/metrics")).call()?;
            size = response.body_mut().read_to_string()?.len();
        }
        format!("10 scrapes of {size} bytes")
    } else {
        let mut response = agent
            .post(format!("http://{http}/api/tubes/default/flush"))
            .header("Content-Type", "application/json")
            .send(r#"{"state":"buried"}"#)?;
        response.body_mut().read_to_string()?
    };
    let took = call_started.elapsed();
    let during = std::mem::take(&mut *log.lock().unwrap());
    stop.store(true, Ordering::Relaxed);
    probe.join().expect("probe")?;
    let what = if scrape { "ready" } else { "buried" };
    println!(
        "{jobs} {what} jobs: {answer} in {:.3} s",
        took.as_secs_f64()
    );
    report("meanwhile", during);
    Ok(())
}

fn report(when: &str, mut rtts: Vec<Duration>) {
    rtts.sort_unstable();
    let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize];
    println!(
        "probe round trips, {when}: {} taken, p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        rtts.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        rtts[rtts.len() - 1],
    );
}

/// Puts `n` jobs, then (if `bury`) reserves and buries each (pipelined);
/// returns the first id.
fn fill(addr: &str, n: u64, bury: bool) -> std::io::Result<u64> {
    let stream = TcpStream::connect(addr)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut line = String::new();
    writer.write_all(b"put 0 0 600 1\r\nx\r\n")?;
    reader.read_line(&mut line)?;
    let first: u64 = line
        .trim()
        .trim_start_matches("INSERTED ")
        .parse()
        .map_err(std::io::Error::other)?;
    let chunk = 10_000;
    let mut sent = 1;
    let mut pending = Vec::new();
    while sent < n {
        let k = chunk.min(n - sent);
        pending.clear();
        for _ in 0..k {
            pending.extend_from_slice(b"put 0 0 600 1\r\nx\r\n");
        }
        writer.write_all(&pending)?;
        for _ in 0..k {
            line.clear();
            reader.read_line(&mut line)?;
        }
        sent += k;
    }
    let mut id = first;
    while bury && id < first + n {
        let k = chunk.min(first + n - id);
        pending.clear();
        for i in id..id + k {
            pending.extend_from_slice(format!("reserve-job {i}\r\nbury {i} 0\r\n").as_bytes());
        }
        writer.write_all(&pending)?;
        for _ in 0..k {
            line.clear();
            reader.read_line(&mut line)?; // RESERVED id 1
            line.clear();
            reader.read_line(&mut line)?; // the body
            line.clear();
            reader.read_line(&mut line)?; // BURIED
            if line != "BURIED\r\n" {
                return Err(std::io::Error::other(format!("bury: {line:?}")));
            }
        }
        id += k;
    }
    Ok(first)
}

/// Round trips of `stats-tube default` until `stop`.
fn probe(addr: &str, stop: &AtomicBool, log: &Mutex<Vec<Duration>>) -> std::io::Result<()> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut line = String::new();
    let mut body = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        writer.write_all(b"stats-tube default\r\n")?;
        line.clear();
        reader.read_line(&mut line)?;
        let len: usize = line
            .trim()
            .trim_start_matches("OK ")
            .parse()
            .map_err(std::io::Error::other)?;
        body.resize(len + 2, 0);
        std::io::Read::read_exact(&mut reader, &mut body)?;
        let rtt = t.elapsed();
        log.lock().unwrap().push(rtt);
    }
    Ok(())
}
