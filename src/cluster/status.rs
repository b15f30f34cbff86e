//! What a node says of its cluster at the default log level (the
//! `crate::STATUS` target): the cluster it joined and its part at first,
//! every change of part or of the leader it follows after, and the
//! members it sees whenever they change. One line each, never repeated:
//! an operator sees a takeover or a node leaving without `-V`.

use super::claim::Claim;

/// This node's part, as the stream's meta message or its own claim of
/// the stream tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Leader {
        epoch: u64,
    },
    Standby {
        /// The leader's node id and address.
        leader: String,
        addr: String,
        epoch: u64,
    },
}

/// The line for a change of part from `before` (`None`: nothing said
/// yet) to `now`; `None` when nothing changed.
pub fn part_line(cluster: &str, node: &str, before: Option<&Part>, now: &Part) -> Option<String> {
    if before == Some(now) {
        return None;
    }
    Some(match (before, now) {
        (None, Part::Leader { epoch }) => {
            format!("joined cluster {cluster} as node {node} (role leader, epoch {epoch})")
        }
        (
            None,
            Part::Standby {
                leader,
                addr,
                epoch,
            },
        ) => format!(
            "joined cluster {cluster} as node {node} (role standby following {leader} at \
             {addr}, epoch {epoch})"
        ),
        (Some(_), Part::Leader { epoch }) => format!("became leader at epoch {epoch}"),
        (
            Some(Part::Leader { .. }),
            Part::Standby {
                leader,
                addr,
                epoch,
            },
        ) => {
            format!("became standby following {leader} at {addr} (epoch {epoch})")
        }
        (
            Some(Part::Standby { .. }),
            Part::Standby {
                leader,
                addr,
                epoch,
            },
        ) => {
            format!("following {leader} at {addr} (epoch {epoch})")
        }
    })
}

/// Says each change of this node's part once.
pub struct Teller {
    cluster: String,
    node: String,
    said: Option<Part>,
}

impl Teller {
    pub fn new(cluster: &str, node: &str) -> Teller {
        Teller {
            cluster: cluster.to_string(),
            node: node.to_string(),
            said: None,
        }
    }

    /// Logs the line for `now`, if it is news.
    pub fn tell(&mut self, now: Part) {
        let Some(line) = part_line(&self.cluster, &self.node, self.said.as_ref(), &now) else {
            return;
        };
        let (role, epoch) = match &now {
            Part::Leader { epoch } => ("leader", *epoch),
            Part::Standby { epoch, .. } => ("standby", *epoch),
        };
        tracing::info!(
            target: crate::STATUS,
            cluster = %self.cluster,
            node = %self.node,
            role,
            epoch,
            "{line}"
        );
        self.said = Some(now);
    }
}

/// The members line: every node that holds a claim, by id, with its
/// address; `None` when the list is what it was.
pub fn members_line(before: Option<&[(String, Claim)]>, now: &[(String, Claim)]) -> Option<String> {
    if before == Some(now) {
        return None;
    }
    let each: Vec<String> = now
        .iter()
        .map(|(id, c)| format!("{id} at {}", c.addr))
        .collect();
    Some(format!(
        "cluster members ({}): {}",
        now.len(),
        each.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standby(leader: &str, epoch: u64) -> Part {
        Part::Standby {
            leader: leader.into(),
            addr: format!("{leader}.host:11300"),
            epoch,
        }
    }

    #[test]
    fn each_change_of_part_is_one_line() {
        let lead = |epoch| Part::Leader { epoch };
        // (said before, now, the line)
        let table = [
            (None, lead(1), Some("joined cluster c as node n2 (role leader, epoch 1)")),
            (
                None,
                standby("n1", 4),
                Some("joined cluster c as node n2 (role standby following n1 at n1.host:11300, epoch 4)"),
            ),
            (Some(standby("n1", 4)), standby("n1", 4), None),
            (Some(lead(5)), lead(5), None),
            (Some(standby("n1", 4)), lead(5), Some("became leader at epoch 5")),
            (
                Some(standby("n1", 4)),
                standby("n3", 5),
                Some("following n3 at n3.host:11300 (epoch 5)"),
            ),
            (
                Some(standby("n1", 4)),
                standby("n1", 6),
                Some("following n1 at n1.host:11300 (epoch 6)"),
            ),
            (
                Some(lead(5)),
                standby("n3", 6),
                Some("became standby following n3 at n3.host:11300 (epoch 6)"),
            ),
        ];
        for (before, now, want) in table {
            let line = part_line("c", "n2", before.as_ref(), &now);
            assert_eq!(line.as_deref(), want, "{before:?} -> {now:?}");
        }
    }

    #[test]
    fn members_are_told_when_they_change() {
        let claim = |addr: &str| Claim {
            addr: addr.into(),
            peer_tls: false,
        };
        let two = vec![
            ("n1".to_string(), claim("h1:1")),
            ("n2".to_string(), claim("h2:1")),
        ];
        let one = vec![("n1".to_string(), claim("h1:1"))];
        assert_eq!(
            members_line(None, &two).as_deref(),
            Some("cluster members (2): n1 at h1:1, n2 at h2:1")
        );
        assert_eq!(members_line(Some(&two), &two), None);
        assert_eq!(
            members_line(Some(&two), &one).as_deref(),
            Some("cluster members (1): n1 at h1:1")
        );
    }
}
