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

/// `sizes[m]` is the length of message `m` (label line and body); `last_head` the length of
/// the newest message's label line.
pub fn fit(sizes: &[usize], last_head: usize, budget: usize, no_removal: usize) -> Fit {
    let frame = frame_len();
    let total = frame.saturating_add(sizes.iter().fold(0usize, |a, &s| a.saturating_add(s)));
    if total <= no_removal || total <= budget {
        return Fit::From(0);
    }
    let mut first = sizes.len();
    let mut running = frame;
    while first > 0 {
        let size = sizes.get(first - 1).copied().unwrap_or(0);
        if running.saturating_add(size) > budget {
            break;
        }
        first -= 1;
        running += size;
    }
    if first < sizes.len() {
        return Fit::From(first);
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
        assert_eq!(fit(&[10, 20], 5, 70, 0), Fit::From(0));
        assert_eq!(fit(&[10, 20], 5, 0, 70), Fit::From(0));
    }

    #[test]
    fn oldest_removed_first() {
        // frame 40: 40 + 30 = 70 fits, + 20 = 90 does not.
        assert_eq!(fit(&[20, 10, 20], 5, 89, 0), Fit::From(1));
        assert_eq!(fit(&[20, 10, 20], 5, 70, 0), Fit::From(1));
        assert_eq!(fit(&[20, 10, 20], 5, 69, 0), Fit::From(2));
    }

    #[test]
    fn hard_cap_when_newest_alone_is_too_big() {
        assert_eq!(
            fit(&[10, 500], 7, 200, 0),
            Fit::HardCap {
                limit: 200 - 47 - 36
            }
        );
        assert_eq!(fit(&[500], 7, 50, 0), Fit::HardCap { limit: 0 });
    }
}
