//! Stage 3b: frame the transcript and drop the oldest messages to fit the budget, from the
//! message sizes alone (each summed once, never re-formatted).

pub const OPEN: &str = "<inherited_context>";
pub const CLOSE: &str = "\n</inherited_context>";
/// Room kept for the hard cap's marker (its digits included).
pub const HARD_CAP_RESERVE: usize = 36;

/// The frame's length in code points.
pub fn frame_len() -> usize {
    OPEN.len() + CLOSE.len()
}

/// Which messages survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// messages `first..` all fit
    From(usize),
    /// even the newest alone is too big: its body is cut to at most `limit` chars
    HardCap { limit: usize },
}

/// `newest_first[k]` is the length (label line and body) of the `k`-th newest of `count`
/// messages: all of them, or as many as it took for the running total to be sure to exceed
/// the budget (the older ones are dropped whatever their size). `last_head` is the length of
/// the newest message's label line.
pub fn fit(
    newest_first: &[usize],
    count: usize,
    last_head: usize,
    budget: usize,
    no_removal: usize,
) -> Fit {
    let frame = frame_len();
    let total = newest_first.iter().fold(frame, |a, &s| a.saturating_add(s));
    if newest_first.len() == count && (total <= no_removal || total <= budget) {
        return Fit::From(0);
    }
    let mut kept = 0;
    let mut running = frame;
    for &size in newest_first {
        if running.saturating_add(size) > budget {
            break;
        }
        running += size;
        kept += 1;
    }
    if kept > 0 {
        return Fit::From(count - kept);
    }
    let limit = budget
        .saturating_sub(frame + last_head)
        .saturating_sub(HARD_CAP_RESERVE);
    Fit::HardCap { limit }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_removed_when_it_fits() {
        assert_eq!(fit(&[20, 10], 2, 5, 70, 0), Fit::From(0));
        assert_eq!(fit(&[20, 10], 2, 5, 0, 70), Fit::From(0));
    }

    #[test]
    fn oldest_removed_first() {
        // frame 40: 40 + 30 = 70 fits, + 20 = 90 does not.
        assert_eq!(fit(&[20, 10, 20], 3, 5, 89, 0), Fit::From(1));
        assert_eq!(fit(&[20, 10, 20], 3, 5, 70, 0), Fit::From(1));
        assert_eq!(fit(&[20, 10, 20], 3, 5, 69, 0), Fit::From(2));
        // measured only as far as needed: the older messages are dropped unmeasured
        assert_eq!(fit(&[20, 10], 1000, 5, 69, 0), Fit::From(999));
    }

    #[test]
    fn hard_cap_when_newest_alone_is_too_big() {
        assert_eq!(
            fit(&[500, 10], 2, 7, 200, 0),
            Fit::HardCap {
                limit: 200 - 47 - 36
            }
        );
        assert_eq!(fit(&[500], 1, 7, 50, 0), Fit::HardCap { limit: 0 });
        assert_eq!(fit(&[500], 9, 7, 50, 0), Fit::HardCap { limit: 0 });
    }
}
