//! The pause between retries of a connection that keeps failing: short at
//! first (a blip costs little), doubling up to a ceiling (a node down for
//! long is not hammered), back to the start once it works again.

use std::time::Duration;

/// Pauses that double from `min` up to `max`.
#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    pub const fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            next: min,
            min,
            max,
        }
    }

    /// Redis nodes, clusters and subscriptions: 100 ms doubling to 5 s.
    pub const fn redis() -> Backoff {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The pause to take now; the next one is twice as long, up to `max`.
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (pause * 2).min(self.max);
        pause
    }

    /// Sleeps for [`Backoff::next_pause`].
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_pause()).await;
    }

    /// It worked: the next failure starts again from `min`.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_ceiling_and_start_over_after_a_reset() {
        let ms = Duration::from_millis;
        let table: [(Backoff, &[u64]); 2] = [
            (
                Backoff::redis(),
                &[100, 200, 400, 800, 1600, 3200, 5000, 5000],
            ),
            (
                Backoff::new(ms(50), ms(2000)),
                &[50, 100, 200, 400, 800, 1600, 2000, 2000],
            ),
        ];
        for (mut backoff, pauses) in table {
            let got: Vec<Duration> = pauses.iter().map(|_| backoff.next_pause()).collect();
            let want: Vec<Duration> = pauses.iter().map(|&p| ms(p)).collect();
            assert_eq!(got, want);
            backoff.reset();
            assert_eq!(backoff.next_pause(), ms(pauses[0]));
        }
    }
}
