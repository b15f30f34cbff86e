//! Connections blocked in `reserve` and what the timers end: waiters
//! served as jobs become ready, a delayed job's moment, a TTR or a reserve
//! timeout running out (beanstalkd's `conn_timeout`).

use sprout_protocol::Response;

use super::conn::ConnId;
use super::conn::Wait;
use super::machine::Engine;
use super::timers::TimerKey;
use super::tube_ix::TubeIx;

impl Engine {
    /// Hands tube `t`'s ready jobs to its waiters, oldest waiter first,
    /// unless the tube is paused.
    pub(super) fn serve_waiters(&mut self, t: TubeIx) {
        loop {
            let tube = &self.tubes[t];
            if tube.is_paused() {
                return;
            }
            // Waiters first: with none (most puts), no job is looked at.
            let Some((_, &conn)) = tube.waiters.first_key_value() else {
                return;
            };
            if self.ready_top(t).is_none() {
                return;
            }
            let batch = self.conns[&conn].wait.as_ref().and_then(|w| w.batch);
            self.stop_waiting(conn);
            // The tube's top is ready for it, so there is a job to take.
            let reply = self.reserve_now(conn, batch).expect("a ready job");
            self.wakeups.push((conn, reply));
        }
    }

    pub(super) fn stop_waiting(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(wait) = c.wait.take() else { return };
        for &t in &c.watch {
            self.tubes[t].waiters.remove(&wait.seq);
        }
        self.stats.waiting -= 1;
        self.arm_conn(conn);
    }

    pub(super) fn arm_delayed(&mut self, t: TubeIx) {
        let at = self.tubes[t].delayed.peek().map(|e| e.deadline);
        self.timers.set(TimerKey::Delayed(t), at);
    }

    pub(super) fn arm_conn(&mut self, conn: ConnId) {
        self.timers
            .set(TimerKey::Conn(conn), self.conns[&conn].due());
    }

    /// Tube `t`'s soonest delayed job is due: ready, or held if it is an
    /// `aft:` job whose group has members (`ext.rs`).
    pub(super) fn delay_ended(&mut self, t: TubeIx) {
        match self.tubes[t].delayed.peek() {
            Some(due) if { due.deadline } <= self.now => {
                let slot = due.slot;
                self.take_out(slot);
                if !self.on_delay_ended(slot) {
                    self.make_ready(slot);
                }
            }
            _ => self.arm_delayed(t),
        }
    }

    /// Something is due for `conn` (beanstalkd's `conn_timeout`): a waiter
    /// whose job entered the safety margin gets DEADLINE_SOON, its soonest
    /// job goes back to ready if its TTR has run out (whether the client
    /// is active or not), and a waiter whose timeout passed gets TIMED_OUT.
    pub(super) fn conn_due(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if c.wait.is_some() && c.deadline_soon(self.now) {
            self.stop_waiting(conn);
            self.wakeups.push((conn, Response::DeadlineSoon));
        }
        if let Some((deadline, slot)) = self.conns[&conn].soonest() {
            if deadline <= self.now {
                self.time_out(conn, slot);
            }
        }
        let timed_out = self.conns[&conn]
            .wait
            .as_ref()
            .filter(|w| w.until.is_some_and(|until| until <= self.now));
        if let Some(wait) = timed_out {
            let answer = Wait::timed_out(wait.batch);
            self.stop_waiting(conn);
            self.wakeups.push((conn, answer));
        }
        self.arm_conn(conn);
    }
}
