//! Where written text goes: a `String`, or the `Context` of a render, which keeps the
//! non-ASCII Python strings of walked objects as references to their own code units. Those are
//! then copied once, into the result `str` (`pystr.rs`), instead of being encoded to UTF-8 here
//! and decoded back there.

use crate::units::Units;

/// A sink for text and code units (`'s`: the session the units belong to).
pub trait Output<'s> {
    /// The UTF-8 text so far, to append to.
    fn text(&mut self) -> &mut String;
    fn push_units(&mut self, units: Units<'s>);
    fn push_str(&mut self, s: &str) {
        self.text().push_str(s);
    }
}

impl<'s> Output<'s> for String {
    fn text(&mut self) -> &mut String {
        self
    }
    fn push_units(&mut self, units: Units<'s>) {
        units.push_to(self);
    }
}

/// The context of a render: UTF-8 text, and code units standing at byte offsets of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context<'s> {
    text: String,
    /// `(at, units)`: the units come before byte `at` of `text`; in order
    units: Vec<(usize, Units<'s>)>,
}

impl<'s> Output<'s> for Context<'s> {
    fn text(&mut self) -> &mut String {
        &mut self.text
    }
    fn push_units(&mut self, units: Units<'s>) {
        if units.len() > 0 {
            self.units.push((self.text.len(), units));
        }
    }
}

/// A piece of a `Context`, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'c, 's> {
    Text(&'c str),
    Units(Units<'s>),
}

impl<'s> Context<'s> {
    /// An empty context with room for `bytes` of text.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            text: String::with_capacity(bytes),
            units: Vec::new(),
        }
    }

    /// The UTF-8 text, when no code units were pushed (else `None`).
    pub fn as_text(&self) -> Option<&str> {
        self.units.is_empty().then_some(self.text.as_str())
    }

    /// The pieces in order (empty text pieces left out).
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_, 's>> + '_ {
        let mut from = 0;
        let text = &self.text;
        self.units
            .iter()
            .flat_map(move |&(at, units)| {
                let before = text.get(from..at).unwrap_or("");
                from = at;
                [Piece::Text(before), Piece::Units(units)]
            })
            .chain(std::iter::once_with(move || {
                Piece::Text(
                    text.get(self.units.last().map_or(0, |&(at, _)| at)..)
                        .unwrap_or(""),
                )
            }))
            .filter(|piece| !matches!(piece, Piece::Text("")))
    }

    /// The whole context as UTF-8.
    pub fn to_utf8(&self) -> String {
        let mut out = String::with_capacity(self.text.len());
        for piece in self.pieces() {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Units(units) => units.push_to(&mut out),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_come_out_in_order() {
        let wide: Vec<u32> = "😀漢".chars().map(u32::from).collect();
        let narrow = [0xe9u8];
        let mut c = Context::default();
        c.push_units(Units::Four(&wide));
        c.push_str("a");
        c.push_units(Units::One(&narrow));
        c.push_units(Units::One(&[]));
        c.push_units(Units::Four(&wide));
        c.push_str("bc");
        assert_eq!(c.to_utf8(), "😀漢aé😀漢bc");
        assert_eq!(c.as_text(), None);
        assert_eq!(c.pieces().count(), 5);
        let mut plain = Context::default();
        plain.push_str("xy");
        assert_eq!(plain.as_text(), Some("xy"));
        assert_eq!(plain.to_utf8(), "xy");
    }
}
