//! The code units of Python strings kept in their own layout (one, two or four bytes per code
//! point): slices, the lone surrogate check, the largest code point, and UTF-8.

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

    /// The largest code point (0 for none): it decides the kind of a `str` holding them.
    pub fn max_point(self) -> u32 {
        match self {
            Units::One(u) => u.iter().copied().max().map_or(0, u32::from),
            Units::Two(u) => u.iter().copied().max().map_or(0, u32::from),
            Units::Four(u) => u.iter().copied().max().unwrap_or(0),
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
