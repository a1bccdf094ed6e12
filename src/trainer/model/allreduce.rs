//! A synchronous all-reduce over device threads that never waits for an idle thread.
//!
//! Each step gathers one part from every *active* thread, then applies the sum once
//! (like PaddlePaddle's MultiGradientMachine). A thread is in one of four states:
//! active (working on its next part), waiting (its part is in, it blocks until the step
//! completes), idle (waiting for data; see [`AllReduce::set_idle`]) or finished. A step
//! completes as soon as at least one part is in and no thread is active: the thread
//! whose move makes that true — the last to contribute, or one going idle or
//! finishing — applies the step and wakes the waiters. So threads with unequal amounts
//! of data never deadlock, as long as each marks itself idle before it blocks on
//! anything other than the all-reduce.
//!
//! An *ordered* all-reduce ([`AllReduce::ordered`]) makes each step the same from run
//! to run when every member gets one part per step (the `--lockstep` stepper deals
//! them so): a step waits for idle members too (for at most [`ORDERED_WAIT`], so a
//! member that gets no more data cannot hold the others forever), and its parts are
//! added in member order rather than in the order they came, so the floating point
//! sums are the same.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use crate::trainer::error::AllReduceError;

/// How long an ordered step waits for idle members before it is applied without them.
pub const ORDERED_WAIT: Duration = Duration::from_secs(2);

/// What an [`AllReduce`] combines: parts are added during a step, applied at its end.
pub trait Reduce: Send {
    /// One thread's contribution to a step.
    type Part;
    /// Adds one part to the current step.
    fn add(&mut self, part: Self::Part);
    /// Ends the step: applies the parts added since the last call.
    fn apply(&mut self);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    Active,
    Waiting,
    Idle,
    Finished,
}

struct State<R: Reduce> {
    reducer: R,
    members: Vec<Member>,
    /// Number of completed steps.
    generation: u64,
    /// Parts added to the current step.
    parts: usize,
    /// Ordered: the current step's parts by member, added at its end in member order.
    pending: Option<Vec<Option<R::Part>>>,
}

impl<R: Reduce> State<R> {
    /// Applies the step if it has parts and no member is still working on one.
    fn complete_if_ready(&mut self) -> bool {
        let waits_for_idle = self.pending.is_some();
        let busy = |m: &Member| *m == Member::Active || (waits_for_idle && *m == Member::Idle);
        let ready = self.parts > 0 && !self.members.iter().any(busy);
        if ready {
            self.apply();
        }
        ready
    }

    /// Applies the step with the parts in: in member order when ordered.
    fn apply(&mut self) {
        if let Some(pending) = &mut self.pending {
            for part in pending.iter_mut().filter_map(Option::take) {
                self.reducer.add(part);
            }
        }
        self.reducer.apply();
        self.parts = 0;
        self.generation += 1;
        for member in &mut self.members {
            if *member == Member::Waiting {
                *member = Member::Active;
            }
        }
    }

    fn check(&self, member: usize) -> Result<Member, AllReduceError> {
        let members = self.members.len();
        match self.members.get(member) {
            None => Err(AllReduceError::OutOfRange { member, members }),
            Some(Member::Finished) => Err(AllReduceError::Finished { member }),
            Some(state) => Ok(*state),
        }
    }
}

/// Steps shared by a fixed set of threads, numbered `0..members`. Every member starts idle.
pub struct AllReduce<R: Reduce> {
    state: Mutex<State<R>>,
    stepped: Condvar,
}

impl<R: Reduce> AllReduce<R> {
    /// An all-reduce for `members` threads around `reducer`.
    pub fn new(members: usize, reducer: R) -> Self {
        let state = State {
            reducer,
            members: vec![Member::Idle; members],
            generation: 0,
            parts: 0,
            pending: None,
        };
        AllReduce {
            state: Mutex::new(state),
            stepped: Condvar::new(),
        }
    }

    /// An ordered all-reduce (see the module's documentation): the same steps from
    /// run to run when every member gets one part per step.
    pub fn ordered(members: usize, reducer: R) -> Self {
        let all = AllReduce::new(members, reducer);
        all.lock().pending = Some((0..members).map(|_| None).collect());
        all
    }

    /// Number of member threads.
    pub fn members(&self) -> usize {
        self.lock().members.len()
    }

    /// Marks `member` active: the next step waits for its part. Call before reading the
    /// state the part is computed from.
    pub fn activate(&self, member: usize) -> Result<(), AllReduceError> {
        let mut state = self.lock();
        state.check(member)?;
        state.members[member] = Member::Active;
        Ok(())
    }

    /// Adds `part` to the current step and blocks until the step is applied; returns the
    /// number of steps applied so far.
    pub fn step(&self, member: usize, part: R::Part) -> Result<u64, AllReduceError> {
        let mut state = self.lock();
        state.check(member)?;
        match &mut state.pending {
            Some(pending) => pending[member] = Some(part),
            None => state.reducer.add(part),
        }
        state.parts += 1;
        state.members[member] = Member::Waiting;
        let generation = state.generation;
        if state.complete_if_ready() {
            self.stepped.notify_all();
            return Ok(state.generation);
        }
        let deadline = Instant::now() + ORDERED_WAIT;
        while state.generation == generation {
            if state.pending.is_none() {
                state = self
                    .stepped
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // An idle member got no part in time: the step goes on without it.
                if !state.members.contains(&Member::Active) {
                    state.apply();
                    self.stepped.notify_all();
                    break;
                }
            }
            let wait = if left.is_zero() { ORDERED_WAIT } else { left };
            state = self
                .stepped
                .wait_timeout(state, wait)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        Ok(state.generation)
    }

    /// Marks `member` idle (it is about to wait for data) or active again. Going idle can
    /// complete the current step. Does nothing for a finished member.
    pub fn set_idle(&self, member: usize, idle: bool) {
        let to = if idle { Member::Idle } else { Member::Active };
        self.leave_as(member, to);
    }

    /// Marks `member` permanently idle; it can no longer contribute. Can complete the
    /// current step.
    pub fn finish(&self, member: usize) {
        self.leave_as(member, Member::Finished);
    }

    /// Reads the whole state (tests).
    #[cfg(test)]
    fn read_state<T>(&self, read: impl FnOnce(&State<R>) -> T) -> T {
        read(&self.lock())
    }

    /// Reads the reducer's state.
    pub fn read<T>(&self, read: impl FnOnce(&R) -> T) -> T {
        read(&self.lock().reducer)
    }

    /// Changes the reducer's state outside a step (what it keeps besides its parts).
    pub fn update<T>(&self, update: impl FnOnce(&mut R) -> T) -> T {
        update(&mut self.lock().reducer)
    }

    fn leave_as(&self, member: usize, to: Member) {
        let mut state = self.lock();
        if !matches!(state.check(member), Ok(Member::Active | Member::Idle)) {
            return;
        }
        state.members[member] = to;
        if state.complete_if_ready() {
            self.stepped.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<R>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    /// Sums parts; records each applied step's sum.
    #[derive(Default)]
    struct Sum {
        current: u64,
        steps: Vec<u64>,
    }

    impl Reduce for Sum {
        type Part = u64;
        fn add(&mut self, part: u64) {
            self.current += part;
        }
        fn apply(&mut self) {
            self.steps.push(self.current);
            self.current = 0;
        }
    }

    /// Runs one thread per entry of `batches`, each stepping that many times (optionally
    /// idling between steps), and fails instead of hanging if they deadlock.
    fn run(batches: &[u64], idle_between: bool) -> Vec<u64> {
        let reduce = Arc::new(AllReduce::new(batches.len(), Sum::default()));
        let (done, finished) = mpsc::channel();
        for (member, &count) in batches.iter().enumerate() {
            let reduce = Arc::clone(&reduce);
            let done = done.clone();
            thread::spawn(move || {
                for _ in 0..count {
                    reduce.activate(member).expect("activate");
                    reduce.step(member, 1).expect("step");
                    if idle_between {
                        reduce.set_idle(member, true);
                        thread::sleep(Duration::from_millis(member as u64));
                        reduce.set_idle(member, false);
                    }
                }
                reduce.finish(member);
                done.send(member).expect("report done");
            });
        }
        for _ in batches {
            finished
                .recv_timeout(Duration::from_secs(10))
                .expect("all-reduce deadlocked");
        }
        reduce.read(|sum| sum.steps.clone())
    }

    #[test]
    fn unequal_batches_do_not_deadlock() {
        let steps = run(&[1, 10, 3, 0], false);
        assert_eq!(steps.iter().sum::<u64>(), 14);
        assert!(steps.len() >= 10, "thread with 10 batches takes 10 steps");
    }

    #[test]
    fn idling_between_batches_does_not_deadlock() {
        let steps = run(&[1, 10, 3, 7], true);
        assert_eq!(steps.iter().sum::<u64>(), 21);
    }

    #[test]
    fn active_threads_step_together() {
        let reduce = Arc::new(AllReduce::new(2, Sum::default()));
        reduce.activate(0).expect("activate 0");
        reduce.activate(1).expect("activate 1");
        let other = Arc::clone(&reduce);
        let handle = thread::spawn(move || other.step(1, 5).expect("step 1"));
        assert_eq!(reduce.step(0, 2).expect("step 0"), 1);
        assert_eq!(handle.join().expect("join"), 1);
        assert_eq!(reduce.read(|sum| sum.steps.clone()), vec![7]);
    }

    #[test]
    fn going_idle_completes_a_step() {
        let reduce = Arc::new(AllReduce::new(2, Sum::default()));
        reduce.activate(0).expect("activate 0");
        reduce.activate(1).expect("activate 1");
        let other = Arc::clone(&reduce);
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || tx.send(other.step(0, 3).expect("step 0")));
        // Member 0 waits in its step...
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while reduce.read_state(|s| s.members[0] != Member::Waiting) {
            assert!(
                std::time::Instant::now() < deadline,
                "member 0 never stepped"
            );
            thread::yield_now();
        }
        // ... which member 1, active, holds open.
        assert!(rx.try_recv().is_err(), "step waits for the active member");
        assert_eq!(reduce.read_state(|s| s.generation), 0);
        reduce.set_idle(1, true);
        let generation = rx.recv_timeout(Duration::from_secs(5)).expect("step done");
        assert_eq!(generation, 1);
    }

    #[test]
    fn finished_members_cannot_step() {
        let reduce = AllReduce::new(1, Sum::default());
        reduce.finish(0);
        reduce.set_idle(0, false);
        assert_eq!(
            reduce.step(0, 1),
            Err(AllReduceError::Finished { member: 0 })
        );
        assert!(matches!(
            reduce.activate(3),
            Err(AllReduceError::OutOfRange { member: 3, .. })
        ));
    }

    /// Records the order parts were added in.
    #[derive(Default)]
    struct Order {
        current: Vec<usize>,
        steps: Vec<Vec<usize>>,
    }

    impl Reduce for Order {
        type Part = usize;
        fn add(&mut self, part: usize) {
            self.current.push(part);
        }
        fn apply(&mut self) {
            self.steps.push(std::mem::take(&mut self.current));
        }
    }

    #[test]
    fn an_ordered_step_waits_for_idle_members_and_adds_parts_in_member_order() {
        let reduce = Arc::new(AllReduce::ordered(2, Order::default()));
        let late = Arc::clone(&reduce);
        // Member 1 steps first; member 0 is idle a while, then steps.
        let first = thread::spawn(move || {
            late.activate(1).expect("activate");
            late.step(1, 1).expect("step")
        });
        thread::sleep(Duration::from_millis(100));
        assert!(
            reduce.read(|o| o.steps.is_empty()),
            "no step without member 0"
        );
        reduce.activate(0).expect("activate");
        reduce.step(0, 0).expect("step");
        first.join().expect("member 1");
        assert_eq!(reduce.read(|o| o.steps.clone()), vec![vec![0, 1]]);
    }

    #[test]
    fn an_ordered_step_goes_on_without_a_member_idle_too_long() {
        let reduce = AllReduce::ordered(2, Order::default());
        reduce.activate(1).expect("activate");
        reduce.step(1, 1).expect("step");
        assert_eq!(reduce.read(|o| o.steps.clone()), vec![vec![1]]);
    }
}
