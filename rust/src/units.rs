//! The code units of Python strings kept in their own layout (one, two or four bytes per code
//! point): slices, the lone surrogate check, the class of the widest character, and UTF-8.

/// Whether a code unit is in U+D800..U+DFFF: in a Python `str`, a lone surrogate (a pair would
/// be one code point above U+FFFF).
#[inline(always)]
pub fn is_surrogate(unit: u32) -> bool {
    unit & 0xffff_f800 == 0xd800
}

/// The code units of a Python `str` in its own layout (PEP 393), by width: one per code point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units<'a> {
    One(&'a [u8]),
    Two(&'a [u16]),
    Four(&'a [u32]),
}

impl<'a> Units<'a> {
    /// Units `from..to` (clamped).
    pub fn slice(self, from: usize, to: usize) -> Units<'a> {
        fn cut<T>(units: &[T], from: usize, to: usize) -> &[T] {
            let to = to.min(units.len());
            units.get(from.min(to)..to).unwrap_or(&[])
        }
        match self {
            Units::One(u) => Units::One(cut(u, from, to)),
            Units::Two(u) => Units::Two(cut(u, from, to)),
            Units::Four(u) => Units::Four(cut(u, from, to)),
        }
    }

    /// Whether a unit is a surrogate (`is_surrogate`): blocks folded without an early exit, so
    /// the compiler vectorizes the scan.
    pub fn has_surrogate(self) -> bool {
        fn any<T: Copy + Into<u32>>(units: &[T]) -> bool {
            units.chunks(256).any(|block| {
                block
                    .iter()
                    .fold(false, |seen, &u| seen | is_surrogate(u.into()))
            })
        }
        match self {
            Units::One(_) => false,
            Units::Two(u) => any(u),
            Units::Four(u) => any(u),
        }
    }

    /// A code point of the same class as the largest (ASCII, Latin-1, BMP or astral: what
    /// decides the kind of a `str` holding them), 0 for none. The scan goes a block at a time
    /// and stops at the first block holding a code point of the widest class this width can
    /// hold: the largest itself is never needed.
    pub fn widest(self) -> u32 {
        match self {
            Units::One(u) => max_until(u, 0x80),
            Units::Two(u) => max_until(u, 0x100),
            Units::Four(u) => max_until(u, 0x1_0000),
        }
    }

    pub fn len(self) -> usize {
        match self {
            Units::One(u) => u.len(),
            Units::Two(u) => u.len(),
            Units::Four(u) => u.len(),
        }
    }

    /// Append the code points as UTF-8: ASCII runs narrowed a block at a time, the other
    /// code points encoded one by one. Units that are not a code point (never: the walk
    /// refuses strings with lone surrogates) become U+FFFD.
    pub fn push_to(self, out: &mut String) {
        fn push<T: Copy + Into<u32>>(units: &[T], out: &mut String) {
            let ascii = |u: &T| (*u).into() < 0x80;
            // SAFETY: only whole UTF-8 sequences are appended (ASCII bytes, or what
            // `char::encode_utf8` writes), so `out` stays UTF-8.
            let bytes = unsafe { out.as_mut_vec() };
            bytes.reserve(units.len());
            let mut i = 0;
            while i < units.len() {
                let start = i;
                while let Some(block) = units.get(i..i + 16) {
                    if block.iter().fold(0u32, |seen, &u| seen | u.into()) >= 0x80 {
                        break;
                    }
                    i += 16;
                }
                i += units
                    .get(i..)
                    .map_or(0, |rest| rest.iter().take_while(|u| ascii(u)).count());
                let run = units.get(start..i).unwrap_or(&[]);
                bytes.extend(run.iter().map(|&u| u.into() as u8));
                if let Some(&unit) = units.get(i) {
                    let c = char::from_u32(unit.into()).unwrap_or(char::REPLACEMENT_CHARACTER);
                    bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    i += 1;
                }
            }
        }
        match self {
            Units::One(u) => push(u, out),
            Units::Two(u) => push(u, out),
            Units::Four(u) => push(u, out),
        }
    }
}

/// The largest of `units` (0 for none), or the first block maximum that reaches `top`: a
/// block at a time, with no early exit inside a block, so the compiler vectorizes the max.
/// (A fold from zero: `Iterator::max` starts from the first unit, which leaves the vector
/// loop a block of 255 and most of the time in its scalar remainder.)
fn max_until<T: Copy + Ord + Default + Into<u32>>(units: &[T], top: u32) -> u32 {
    let mut widest = 0;
    for block in units.chunks(256) {
        let most = block.iter().fold(T::default(), |most, &u| most.max(u));
        widest = widest.max(most.into());
        if widest >= top {
            break;
        }
    }
    widest
}

/// The class of the widest character of UTF-8 `text`, as `Units::widest`: 0 for ASCII, 0xff
/// for Latin-1, 0xffff for the rest of the BMP, 0x10ffff for the astral planes, read off the
/// lead bytes a block at a time until an astral one is met.
pub fn widest_in_utf8(text: &str) -> u32 {
    match max_until(text.as_bytes(), 0xf0) {
        0..=0x7f => 0,
        0x80..=0xc3 => 0xff,
        0xc4..=0xef => 0xffff,
        _ => 0x10_ffff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widest_finds_the_class_of_the_largest_wherever_it_is() {
        for at in [0usize, 255, 256, 300, 999] {
            let mut four = vec![0x4e2du32; 1000];
            four[at] = 0x1f600;
            assert_eq!(Units::Four(&four).widest(), 0x1f600, "{at}");
            let bmp = vec![0x4e2du32; 1000];
            assert_eq!(Units::Four(&bmp).widest(), 0x4e2d);
            let mut two = vec![0x41u16; 1000];
            two[at] = 0xe9;
            assert_eq!(Units::Two(&two).widest(), 0xe9, "{at}");
            two[at] = 0x4e2d;
            assert!(
                (0x100..=0xffff).contains(&Units::Two(&two).widest()),
                "{at}"
            );
            let mut one = vec![0x41u8; 1000];
            assert_eq!(Units::One(&one).widest(), 0x41);
            one[at] = 0xe9;
            assert_eq!(Units::One(&one).widest(), 0xe9, "{at}");
        }
        assert_eq!(Units::Four(&[]).widest(), 0);
    }

    #[test]
    fn widest_in_utf8_reads_lead_bytes() {
        let ascii = "a".repeat(700);
        assert_eq!(widest_in_utf8(&ascii), 0);
        for (c, class) in [
            ('é', 0xff),
            ('中', 0xffff),
            ('😀', 0x10_ffff),
            ('ÿ', 0xff),
            ('Ā', 0xffff),
        ] {
            for at in [0usize, 255, 256, 600] {
                let text = format!("{}{c}{}", "a".repeat(at), "a".repeat(300));
                assert_eq!(widest_in_utf8(&text), class, "{c} at {at}");
                let mixed = format!("{}é{}{c}", "a".repeat(at), "中".repeat(100));
                let expect = if class == 0x10_ffff { class } else { 0xffff };
                assert_eq!(widest_in_utf8(&mixed), expect, "{c} after CJK at {at}");
            }
        }
    }
}
