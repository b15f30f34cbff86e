//! Copies JetStream can never place: `--cluster-replicas` above the NATS
//! servers' count.
//!
//! JetStream answers such a stream or bucket with "no suitable peers for
//! placement" (error code 10005), the same answer it gives while servers
//! are down or a cluster is still forming; a lone server without a
//! cluster says "replicas > 1 not supported in non-clustered mode"
//! (10074): what the default of three copies meets on one NATS server. Retrying is right for the
//! latter and hopeless for the former, where a node used to log the error
//! every half second for ever: so when more copies are asked for than
//! the servers NATS announces, the node stops with one message naming
//! both numbers.

use super::stream::Trouble;

/// JetStream's answers when it has too few servers for the copies asked.
fn no_peers(why: &str) -> bool {
    ["error code 10005", "error code 10074"]
        .iter()
        .any(|code| why.contains(code))
        || why.contains("no suitable peers for placement")
}

/// How many NATS servers a client sees: the one it is connected to, or
/// every client URL its cluster announces (they include that one).
pub fn servers_seen(client: &async_nats::Client) -> usize {
    client.server_info().connect_urls.len().max(1)
}

/// The pure decision: a passing trouble stays passing unless it is a
/// placement failure with more `replicas` asked than `servers` seen,
/// which no wait will mend.
pub fn judge(trouble: Trouble, replicas: usize, servers: usize) -> Trouble {
    match trouble {
        Trouble::Passing(why) if no_peers(&why) && replicas > servers => Trouble::Refused(format!(
            "--cluster-replicas {replicas} asks for more copies than the {servers} NATS \
                 server(s) this node sees: JetStream keeps each copy on another server, so give \
                 {} on every node, or add NATS servers (NATS said: {why})",
            fewer(servers)
        )),
        other => other,
    }
}

/// The replicas flag that fits `servers` servers.
fn fewer(servers: usize) -> String {
    match servers {
        1 => "--cluster-replicas 1".into(),
        n => format!("--cluster-replicas {n} or fewer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_more_copies_than_servers_is_final() {
        let placement = "cannot create the stream sprout-c: jetstream error: insufficient \
                         resources: no suitable peers for placement (code 500, error code 10005)";
        let timeout = "cannot create the stream sprout-c: jetstream request timed out";
        let lone = "cannot create the stream SPROUT_c: jetstream error: replicas > 1 not \
                    supported in non-clustered mode (code 500, error code 10074)";
        // (NATS's answer, replicas, servers seen, final)
        let table = [
            (placement, 5, 3, true),
            (placement, 3, 1, true),
            (placement, 3, 3, false), // a server is down: it may come back
            (placement, 1, 1, false),
            (timeout, 5, 3, false),
            ("error code 10005", 2, 1, true),
            (lone, 3, 1, true),
            (lone, 1, 1, false),
        ];
        for (why, replicas, servers, last) in table {
            let judged = judge(Trouble::Passing(why.into()), replicas, servers);
            match judged {
                Trouble::Refused(e) => {
                    assert!(last, "{why} {replicas}/{servers}: {e}");
                    let asked = format!("--cluster-replicas {replicas} asks");
                    assert!(e.contains(&asked), "{e}");
                    assert!(e.contains(&format!("the {servers} NATS server(s)")), "{e}");
                    assert!(
                        e.contains(&format!("give --cluster-replicas {servers} ")),
                        "{e}"
                    );
                }
                Trouble::Passing(e) => assert!(!last, "{why} {replicas}/{servers}: {e}"),
            }
        }
        let refused = judge(Trouble::Refused("x".into()), 5, 3);
        assert!(matches!(refused, Trouble::Refused(e) if e == "x"));
    }
}
