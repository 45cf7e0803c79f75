//! Stage 1 on a parsed session: the latest complete compaction boundary and the messages it
//! keeps, then `fork_turns`. The rules are those of `python/asyncagents/compaction.py`
//! (`slice_at_compaction`, `keep_last_turns`), which the reference engine runs; the equivalence
//! tests compare the two engines' whole answers. Here they run on the session itself, so a
//! call builds no Python view of its markers and summaries and no list of kept indexes.

use crate::session::{Message, Session};

/// Stage 1's answer, as `compaction.CompactionSlice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// indexes of the kept messages, in output order
    pub kept: Vec<usize>,
    pub detected: bool,
    /// the summary's index, or -1 without a boundary
    pub slice_index: isize,
    pub tail_messages: usize,
    /// messages `fork_turns` dropped from what the boundary kept
    pub turn_removed: usize,
}

fn is_role(session: &Session, message: &Message, role: &str) -> bool {
    session.role(message) == Some(role)
}

/// Index of the first message whose `info.id` is `id`.
fn index_of(session: &Session, id: &str) -> Option<usize> {
    (session.messages.iter()).position(|m| m.id.is_some_and(|own| session.short(own) == id))
}

/// The summary of a marker: the first summary whose `parentID` is the marker's id, else the
/// first summary after the marker.
fn find_summary(session: &Session, marker_index: usize, marker_id: Option<&str>) -> Option<usize> {
    let summaries = || {
        (session.messages.iter().enumerate())
            .filter(|(_, m)| m.summary && is_role(session, m, "assistant"))
    };
    if let Some(id) = marker_id {
        let named = summaries().find(|(_, m)| m.parent_id.is_some_and(|p| session.short(p) == id));
        if let Some((index, _)) = named {
            return Some(index);
        }
    }
    summaries()
        .map(|(index, _)| index)
        .find(|&index| index > marker_index)
}

/// Keep summary + verbatim tail + everything after the summary; the latest marker that has a
/// summary wins; without a complete boundary every message is kept.
pub fn slice_at_compaction(session: &Session) -> Slice {
    let messages = &session.messages;
    let count = messages.len();
    let markers = (messages.iter().enumerate().rev())
        .filter(|(_, m)| is_role(session, m, "user") && !m.markers.is_empty());
    for (marker_index, marker) in markers {
        let marker_id = marker.id.map(|s| session.short(s));
        let Some(summary) = find_summary(session, marker_index, marker_id) else {
            continue;
        };
        let tail = match marker.markers.first() {
            Some(Some(tail_start_id)) => match index_of(session, tail_start_id) {
                Some(start) if start < marker_index => start..marker_index,
                _ => 0..0,
            },
            _ => 0..0,
        };
        let mut kept = Vec::with_capacity(1 + tail.len() + count.saturating_sub(summary + 1));
        kept.push(summary);
        kept.extend(tail.clone());
        kept.extend(summary + 1..count);
        return Slice {
            kept,
            detected: true,
            slice_index: isize::try_from(summary).unwrap_or(isize::MAX),
            tail_messages: tail.len(),
            turn_removed: 0,
        };
    }
    Slice {
        kept: (0..count).collect(),
        detected: false,
        slice_index: -1,
        tail_messages: 0,
        turn_removed: 0,
    }
}

/// The slice cut to start at the `turns`-th newest user message it keeps: the last `turns`
/// user turns and what followed them. `None`, or a slice with fewer user messages, keeps all.
pub fn keep_last_turns(session: &Session, mut slice: Slice, turns: Option<usize>) -> Slice {
    let Some(turns) = turns else {
        return slice;
    };
    let mut seen = 0;
    for position in (0..slice.kept.len()).rev() {
        let user = (slice.kept.get(position))
            .and_then(|&m| session.messages.get(m))
            .is_some_and(|m| is_role(session, m, "user"));
        if user {
            seen += 1;
            if seen == turns {
                slice.kept.drain(..position);
                slice.turn_removed = position;
                return slice;
            }
        }
    }
    slice
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::from_json as session;

    fn user(id: &str, markers: &str) -> String {
        format!(r#"{{"info":{{"role":"user","id":"{id}"}},"parts":[{markers}]}}"#)
    }

    fn agent(id: &str, parent: &str, summary: bool) -> String {
        format!(
            r#"{{"info":{{"role":"assistant","id":"{id}","parentID":"{parent}","summary":{summary}}},"parts":[]}}"#
        )
    }

    const MARK: &str = r#"{"type":"compaction"}"#;

    fn tail_mark(id: &str) -> String {
        format!(r#"{{"type":"compaction","tail_start_id":"{id}"}}"#)
    }

    #[test]
    fn without_a_boundary_everything_is_kept() {
        let s = session(&format!(
            "[{},{}]",
            user("u1", ""),
            agent("a1", "u1", false)
        ));
        let slice = slice_at_compaction(&s);
        assert_eq!(slice.kept, vec![0, 1]);
        assert!(!slice.detected);
        assert_eq!(slice.slice_index, -1);
    }

    #[test]
    fn summary_tail_and_what_follows() {
        let doc = format!(
            "[{},{},{},{},{},{}]",
            user("u1", ""),
            agent("a1", "u1", false),
            user("u2", ""),
            user("m", &tail_mark("u2")),
            agent("s", "m", true),
            user("u3", "")
        );
        let s = session(&doc);
        let slice = slice_at_compaction(&s);
        assert_eq!(slice.kept, vec![4, 2, 5]);
        assert!(slice.detected);
        assert_eq!((slice.slice_index, slice.tail_messages), (4, 1));
        let cut = keep_last_turns(&s, slice.clone(), Some(1));
        assert_eq!((cut.kept, cut.turn_removed), (vec![5], 2));
        assert_eq!(keep_last_turns(&s, slice.clone(), Some(5)), slice);
    }

    #[test]
    fn a_marker_without_summary_is_skipped_and_the_next_summary_serves() {
        let doc = format!(
            "[{},{},{},{}]",
            user("m1", MARK),
            agent("s1", "other", true),
            user("m2", MARK),
            user("u", "")
        );
        let s = session(&doc);
        // m2 has no summary named for it and none after it; m1 takes the next one, s1
        let slice = slice_at_compaction(&s);
        assert_eq!(slice.kept, vec![1, 2, 3]);
        assert_eq!(slice.slice_index, 1);
    }
}
