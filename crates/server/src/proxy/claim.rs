//! A [`Downstream`](super::downstream::Downstream) wrapper's hold on the shared state it relays
//! for ([`Claim`]): the cache's tee on its fill, forward authentication's gate on its subrequest.
//! The engine's drive can be entered again from inside a wrapper (a retry), and a second
//! wrapper stacked on the same state would act on every event twice: one claim at a time per
//! state, given back when the wrapper is dropped.

use std::cell::RefCell;
use std::ops::Deref;
use std::rc::Rc;

/// State a wrapper relays for: it keeps the flag that says one does now.
pub(crate) trait Claimable {
    /// The flag, true while a [`Claim`] is held.
    fn claimed(&mut self) -> &mut bool;
}

/// The one claim on `T` (derefs to the shared state).
pub(crate) struct Claim<T: Claimable>(Rc<RefCell<T>>);

impl<T: Claimable> Claim<T> {
    /// Claims `state`, or `None` when a claim on it is held already.
    pub(crate) fn take(state: &Rc<RefCell<T>>) -> Option<Self> {
        let mut s = state.borrow_mut();
        let claimed = s.claimed();
        if *claimed {
            return None;
        }
        *claimed = true;
        drop(s);
        Some(Claim(Rc::clone(state)))
    }
}

impl<T: Claimable> Deref for Claim<T> {
    type Target = Rc<RefCell<T>>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<T: Claimable> Drop for Claim<T> {
    fn drop(&mut self) {
        *self.0.borrow_mut().claimed() = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct State(bool);

    impl Claimable for State {
        fn claimed(&mut self) -> &mut bool {
            &mut self.0
        }
    }

    #[test]
    fn one_claim_at_a_time() {
        let state = Rc::new(RefCell::new(State::default()));
        let first = Claim::take(&state).expect("unclaimed");
        assert!(Claim::take(&state).is_none());
        assert!(first.borrow().0);
        drop(first);
        assert!(!state.borrow().0);
        assert!(Claim::take(&state).is_some());
    }
}
