//! What `sprout admin` shows a person: tables with aligned columns,
//! durations in human units, bodies escaped and capped.

use serde_json::Value;

use super::args::AdminCommand;

/// A table (or a line) for people.
pub(super) fn human(command: &AdminCommand, answer: &Value) -> String {
    match command {
        AdminCommand::Server => key_values(&answer["stats"]),
        AdminCommand::Cluster => cluster_view(answer),
        AdminCommand::Tubes => {
            let columns = [
                ("tube", "name"),
                ("ready", "current_jobs_ready"),
                ("reserved", "current_jobs_reserved"),
                ("delayed", "current_jobs_delayed"),
                ("buried", "current_jobs_buried"),
                ("waiting", "current_waiting"),
                ("total", "total_jobs"),
                ("paused", "paused"),
            ];
            table(
                &columns,
                answer["tubes"].as_array().map_or(&[][..], Vec::as_slice),
            )
        }
        AdminCommand::Jobs { .. } => {
            let columns = [
                ("id", "id"),
                ("pri", "pri"),
                ("age", "age"),
                ("time-left", "time_left"),
                ("size", "size"),
                ("body", "preview"),
            ];
            let jobs: Vec<Value> = answer["jobs"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(with_human_ages)
                .collect();
            let mut out = table(&columns, &jobs);
            if let Some(next) = answer["next"].as_str() {
                out.push_str(&format!("next page: --after {next}\n"));
            }
            out
        }
        AdminCommand::Job { .. } => {
            let mut stats = with_human_ages(answer);
            let body = stats.as_object_mut().and_then(|o| {
                o.remove("body_text");
                o.remove("preview");
                o.remove("body_truncated");
                o.remove("body_base64")
            });
            let mut out = key_values(&stats);
            let bytes = body.as_ref().and_then(Value::as_str).and_then(|b64| {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(b64).ok()
            });
            match bytes {
                Some(bytes) => out.push_str(&format!("body:\n{}\n", escaped(&bytes, SHOWN_BODY))),
                None => out.push_str("body: too large to show inline: see --raw\n"),
            }
            out
        }
        _ => {
            // Changes answer one small object, e.g. {"deleted": 1000}.
            let pairs: Vec<String> = answer
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k} {}", plain(v)))
                .collect();
            format!("{}\n", pairs.join(", "))
        }
    }
}

/// `cluster`: the cluster, the leader and its epoch, the node asked, then
/// a table of the members.
fn cluster_view(answer: &Value) -> String {
    let leader = match &answer["leader_node"] {
        Value::String(node) => format!("{node} at {}", plain(&answer["leader"])),
        _ => plain(&answer["leader"]),
    };
    let asked = format!("{} ({})", plain(&answer["node"]), plain(&answer["role"]));
    let summary = [
        ("cluster", plain(&answer["name"])),
        ("leader", leader),
        ("epoch", plain(&answer["epoch"])),
        ("asked", asked),
    ];
    let summary: String = summary
        .iter()
        .map(|(k, v)| format!("{k:7}  {v}\n"))
        .collect();
    let columns = [("node", "node"), ("address", "addr"), ("role", "role")];
    let members = answer["members"].as_array().map_or(&[][..], Vec::as_slice);
    format!("{summary}\n{}", table(&columns, members))
}

/// How much of a body `job` shows: a screenful, not a terminal flooded
/// by a megabyte.
const SHOWN_BODY: usize = 1024;

/// `body` safe to print on a terminal: its first `cap` bytes, text as it
/// is (newlines and tabs too) but other control characters escaped, and
/// bytes that are not UTF-8 as `\xNN`, so a binary body cannot drive the
/// terminal; what is left out is counted.
fn escaped(body: &[u8], cap: usize) -> String {
    let shown = &body[..body.len().min(cap)];
    let mut out = String::new();
    for chunk in shown.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' | '\t' => out.push(c),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        out.push_str(&chunk.invalid().escape_ascii().to_string());
    }
    if body.len() > cap {
        let more = body.len() - cap;
        out.push_str(&format!("… ({more} more bytes: --raw for all of them)"));
    }
    out
}

/// A duration for people: `450ms`, `1.2s`, `3m12s`, `2h05m`, `3d04h`;
/// two units at most, as an age needs no more.
fn human_duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".into();
    }
    if seconds < 1.0 {
        return format!("{}ms", (seconds * 1000.0) as u64);
    }
    if seconds < 60.0 {
        return format!("{:.1}s", (seconds * 10.0).floor() / 10.0);
    }
    let whole = seconds as u64;
    let (d, h, m, s) = (
        whole / 86400,
        whole / 3600 % 24,
        whole / 60 % 60,
        whole % 60,
    );
    match (d, h) {
        (0, 0) => format!("{m}m{s:02}s"),
        (0, _) => format!("{h}h{m:02}m"),
        _ => format!("{d}d{h:02}h"),
    }
}

/// A job object with its durations (seconds in the API) in human units:
/// `age`, `delay` and `ttr` (whole seconds: `30s`), and `time_left` only
/// where a clock runs (delayed: until ready; reserved: until its TTR
/// ends), elsewhere `-`.
fn with_human_ages(job: &Value) -> Value {
    let mut job = job.clone();
    let running = matches!(job["state"].as_str(), Some("delayed" | "reserved"));
    for key in ["age", "time_left"] {
        if let Some(seconds) = job[key].as_f64() {
            job[key] = Value::String(human_duration(seconds));
        }
    }
    if !running && job.get("time_left").is_some() {
        job["time_left"] = Value::Null;
    }
    for key in ["delay", "ttr"] {
        if let Some(seconds) = job[key].as_u64() {
            job[key] = Value::String(format!("{seconds}s"));
        }
    }
    job
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn key_values(object: &Value) -> String {
    let entries: Vec<(&String, &Value)> = object.as_object().into_iter().flatten().collect();
    let width = entries.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    entries
        .iter()
        .map(|(k, v)| format!("{k:width$}  {}\n", plain(v)))
        .collect()
}

/// Rows of `objects` under `columns` (header, key), each column as wide
/// as its widest cell; numbers right-aligned.
fn table(columns: &[(&str, &str)], objects: &[Value]) -> String {
    let cells: Vec<Vec<String>> = objects
        .iter()
        .map(|o| columns.iter().map(|(_, key)| plain(&o[*key])).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (header, _))| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .fold(header.len(), usize::max)
        })
        .collect();
    let numeric: Vec<bool> = (0..columns.len())
        .map(|i| objects.iter().all(|o| o[columns[i].1].is_number()) && !objects.is_empty())
        .collect();
    let line = |row: Vec<String>| {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| match numeric[i] {
                true => format!("{cell:>w$}", w = widths[i]),
                false => format!("{cell:<w$}", w = widths[i]),
            })
            .collect();
        format!("{}\n", cells.join("  ").trim_end())
    };
    let mut out = line(columns.iter().map(|(h, _)| h.to_string()).collect());
    for row in cells {
        out.push_str(&line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn durations_read_in_human_units() {
        // (seconds, shown)
        let table = [
            (0.0, "0ms"),
            (0.45, "450ms"),
            (0.999_9, "999ms"),
            (1.0, "1.0s"),
            (1.26, "1.2s"),
            (59.99, "59.9s"),
            (60.0, "1m00s"),
            (192.4, "3m12s"),
            (3600.0, "1h00m"),
            (7_500.0, "2h05m"),
            (86_400.0 * 3.0 + 4.0 * 3600.0 + 59.0, "3d04h"),
            (-1.0, "-"),
            (f64::NAN, "-"),
        ];
        for (seconds, shown) in table {
            assert_eq!(human_duration(seconds), shown, "{seconds}");
        }
    }

    #[test]
    fn job_durations_carry_units_and_time_left_only_where_a_clock_runs() {
        // (state, time left shown)
        let table = [
            ("delayed", json!("2.5s")),
            ("reserved", json!("2.5s")),
            ("ready", Value::Null),
            ("buried", Value::Null),
        ];
        for (state, left) in table {
            let job =
                json!({"state": state, "age": 0.45, "delay": 30, "ttr": 60, "time_left": 2.5});
            let shown = with_human_ages(&job);
            assert_eq!(shown["time_left"], left, "{state}");
            assert_eq!(
                (&shown["age"], &shown["delay"], &shown["ttr"]),
                (&json!("450ms"), &json!("30s"), &json!("60s"))
            );
        }
    }

    #[test]
    fn bodies_are_escaped_and_capped() {
        // (body, cap, shown)
        let table: [(&[u8], usize, &str); 6] = [
            (b"hello there", 1024, "hello there"),
            (b"two\nlines\tand a tab", 1024, "two\nlines\tand a tab"),
            ("h\u{e9}llo".as_bytes(), 1024, "h\u{e9}llo"),
            (b"\x1b[2Jwiped\r", 1024, "\\u{1b}[2Jwiped\\r"),
            (b"\xff\x00ok", 1024, "\\xff\\u{0}ok"),
            (b"abcdef", 3, "abc… (3 more bytes: --raw for all of them)"),
        ];
        for (body, cap, shown) in table {
            assert_eq!(escaped(body, cap), shown, "{body:?}");
        }
        // A cap in the middle of a character escapes its first bytes.
        assert!(escaped("\u{e9}".as_bytes(), 1).starts_with("\\xc3…"));
    }

    #[test]
    fn tables_align_columns_and_right_align_numbers() {
        let rows = [
            json!({"name": "emails", "n": 3}),
            json!({"name": "a", "n": 1200}),
        ];
        let out = table(&[("tube", "name"), ("count", "n")], &rows);
        assert_eq!(out, "tube    count\nemails      3\na        1200\n");
        assert_eq!(table(&[("tube", "name")], &[]), "tube\n");
    }
}
