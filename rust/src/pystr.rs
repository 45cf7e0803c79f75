//! The rendered context as a Python `str`, written straight into CPython's own layout (one,
//! two or four bytes per code point). Its text is UTF-8 we built, so it needs no check;
//! CPython's general decoder checks every byte again and, for mostly-ASCII text with a few
//! wide characters, widens its buffer as it goes (half of a render with emoji in it). The code
//! units of walked Python strings in the context are copied as they are (`output::Context`),
//! and checked for lone surrogates on the way (`Written::surrogate`): one pass over them, not
//! a check and then a copy.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::output::{Context, Piece};
use crate::units::{is_surrogate, widest_in_utf8, Units};

/// The result `str`, and whether a code unit copied into it is a lone surrogate (only walked
/// strings' units can be: the render then finds the first and raises instead).
pub struct Written<'py> {
    pub string: Bound<'py, PyString>,
    pub surrogate: bool,
}

/// `context`, of `chars` code points, as a `str`. ASCII text goes through CPython's own copy;
/// other contexts are written here into a string of the narrowest kind that holds their widest
/// code point, as CPython would build it (so it compares equal to any other `str` with the
/// same code points). A wrong `chars` costs a conversion by CPython, never a wrong string.
pub fn new_str<'py>(
    py: Python<'py>,
    context: &Context<'_>,
    chars: usize,
) -> PyResult<Written<'py>> {
    // The widest class of character decides the kind (text by its lead bytes, units by their
    // values); once an astral character is met, nothing later can widen it.
    let mut widest = 0;
    for piece in context.pieces() {
        widest = widest.max(match piece {
            Piece::Text(text) => widest_in_utf8(text),
            Piece::Units(units) => units.widest(),
        });
        if widest > 0xffff {
            break;
        }
    }
    if widest < 0x80 {
        if let Some(text) = context.as_text() {
            // SAFETY: the text is the context's only piece, and no byte of it is above 0x7f
            // (`widest_in_utf8` of it is 0)
            let string = unsafe { ascii_str(py, text) }?;
            return Ok(Written {
                string,
                surrogate: false,
            });
        }
    }
    let (maxchar, width): (u32, usize) = match widest {
        0..=0x7f => (0x7f, 1),
        0x80..=0xff => (0xff, 1),
        0x100..=0xffff => (0xffff, 2),
        _ => (0x10_ffff, 4),
    };
    let size = ffi::Py_ssize_t::try_from(chars)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("context too long"))?;
    // SAFETY: PyUnicode_New returns a new reference to a ready, compact `str` of `chars` code
    // units of `width` bytes, uninitialized, or NULL with an exception set.
    let string = unsafe {
        Bound::from_owned_ptr_or_err(py, ffi::PyUnicode_New(size, maxchar))?
            .cast_into_unchecked::<PyString>()
    };
    // SAFETY: the string was just made and is not shared yet; its data is `chars` units of
    // `width` bytes, suitably aligned (CPython places it after the header, aligned for UCS4).
    let written = unsafe {
        let data = ffi::PyUnicode_DATA(string.as_ptr());
        match width {
            1 => write(
                std::slice::from_raw_parts_mut(data.cast::<u8>(), chars),
                context,
            ),
            2 => write(
                std::slice::from_raw_parts_mut(data.cast::<u16>(), chars),
                context,
            ),
            _ => write(
                std::slice::from_raw_parts_mut(data.cast::<u32>(), chars),
                context,
            ),
        }
    };
    match written {
        Some((count, surrogate)) if count == chars => Ok(Written { string, surrogate }),
        // Not reached (the count and the kind come from the same pieces), but never hand out
        // a string with unwritten units (nor skip the check: `surrogate` says "look").
        _ => Ok(Written {
            string: PyString::new(py, &context.to_utf8()),
            surrogate: true,
        }),
    }
}

/// An ASCII `text` as a `str`, copied once: CPython's own decoder would check every byte again
/// as it copies.
///
/// # Safety
/// `text` must be ASCII: a byte above 0x7f would make a `str` that lies about its kind.
unsafe fn ascii_str<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyString>> {
    let size = ffi::Py_ssize_t::try_from(text.len())
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("context too long"))?;
    // PyUnicode_New returns a new reference to a ready, compact ASCII `str` of `size` one-byte
    // units, uninitialized, or NULL with an exception set; it is not shared yet, and the
    // `text.len()` ASCII bytes (the caller's promise) are written into its `size` units.
    let string = Bound::from_owned_ptr_or_err(py, ffi::PyUnicode_New(size, 0x7f))?
        .cast_into_unchecked::<PyString>();
    let data = ffi::PyUnicode_DATA(string.as_ptr()).cast::<u8>();
    std::ptr::copy_nonoverlapping(text.as_ptr(), data, text.len());
    Ok(string)
}

/// Write the pieces of `context` into `out`, whose units are wide enough for every one. The
/// count written and whether a copied unit is a surrogate, or `None` when `out` is too short.
fn write<T: Unit>(out: &mut [T], context: &Context<'_>) -> Option<(usize, bool)> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { write_avx2(out, context) };
    }
    write_pieces(out, context)
}

/// `write` compiled for AVX2: its copy and check of wide units go 8 or 16 at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn write_avx2<T: Unit>(out: &mut [T], context: &Context<'_>) -> Option<(usize, bool)> {
    write_pieces(out, context)
}

#[inline(always)]
fn write_pieces<T: Unit>(out: &mut [T], context: &Context<'_>) -> Option<(usize, bool)> {
    let mut at = 0;
    let mut surrogate = false;
    for piece in context.pieces() {
        let rest = out.get_mut(at..)?;
        at += match piece {
            Piece::Text(text) => decode(rest, text)?,
            Piece::Units(units) => {
                let (n, found) = copy(rest, units)?;
                surrogate |= found;
                n
            }
        };
    }
    Some((at, surrogate))
}

/// Copy code units into `out` (as many as there are, else `None`), each unit fitting `T`, and
/// say whether one is a surrogate (`is_surrogate`; never in one-byte units). The check is
/// folded into the copy, blocks without an early exit, so the compiler vectorizes both.
#[inline(always)]
fn copy<T: Unit>(out: &mut [T], units: Units<'_>) -> Option<(usize, bool)> {
    #[inline(always)]
    fn each<T: Unit, U: Copy + Into<u32>>(out: &mut [T], units: &[U]) -> Option<usize> {
        let out = out.get_mut(..units.len())?;
        for (to, &from) in out.iter_mut().zip(units) {
            *to = T::of(from.into());
        }
        Some(units.len())
    }
    #[inline(always)]
    fn checked<T: Unit, U: Copy + Into<u32>>(out: &mut [T], units: &[U]) -> Option<(usize, bool)> {
        let out = out.get_mut(..units.len())?;
        let mut seen = false;
        for (to, &from) in out.iter_mut().zip(units) {
            let point = from.into();
            seen |= is_surrogate(point);
            *to = T::of(point);
        }
        Some((units.len(), seen))
    }
    match units {
        Units::One(u) => each(out, u).map(|n| (n, false)),
        Units::Two(u) => checked(out, u),
        Units::Four(u) => checked(out, u),
    }
}

/// A code unit of a `str` kind: one, two or four bytes.
trait Unit: Copy {
    /// Code point `point`, which the caller knows fits.
    fn of(point: u32) -> Self;
    /// When the 16 bytes of `block` are ASCII, write them as the first 16 units of `out`
    /// (which has at least 16) and return `true`.
    fn ascii16(block: &[u8; 16], out: &mut [Self]) -> bool;
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    pub use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_movemask_epi8, _mm_setzero_si128, _mm_storeu_si128,
        _mm_unpackhi_epi16, _mm_unpackhi_epi8, _mm_unpacklo_epi16, _mm_unpacklo_epi8,
    };

    /// The 16 bytes, or `None` when one of them is not ASCII.
    #[inline(always)]
    pub fn ascii(block: &[u8; 16]) -> Option<__m128i> {
        // SAFETY: reads the 16 bytes of `block`; SSE2 is part of every x86_64 target.
        unsafe {
            let v = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
            (_mm_movemask_epi8(v) == 0).then_some(v)
        }
    }
}

impl Unit for u8 {
    fn of(point: u32) -> Self {
        u8::try_from(point).unwrap_or(0)
    }
    #[inline(always)]
    fn ascii16(block: &[u8; 16], out: &mut [Self]) -> bool {
        let ascii = block.is_ascii();
        if let (true, Some(out)) = (ascii, out.get_mut(..16)) {
            out.copy_from_slice(block);
        }
        ascii
    }
}

impl Unit for u16 {
    fn of(point: u32) -> Self {
        u16::try_from(point).unwrap_or(0)
    }
    #[inline(always)]
    fn ascii16(block: &[u8; 16], out: &mut [Self]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use sse2::*;
            let (Some(v), Some(out)) = (ascii(block), out.get_mut(..16)) else {
                return false;
            };
            // SAFETY: writes the 16 units (32 bytes) of `out`.
            unsafe {
                let zero = _mm_setzero_si128();
                let dst = out.as_mut_ptr().cast::<__m128i>();
                _mm_storeu_si128(dst, _mm_unpacklo_epi8(v, zero));
                _mm_storeu_si128(dst.add(1), _mm_unpackhi_epi8(v, zero));
            }
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        widen(block, out)
    }
}

impl Unit for u32 {
    fn of(point: u32) -> Self {
        point
    }
    #[inline(always)]
    fn ascii16(block: &[u8; 16], out: &mut [Self]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use sse2::*;
            let (Some(v), Some(out)) = (ascii(block), out.get_mut(..16)) else {
                return false;
            };
            // SAFETY: writes the 16 units (64 bytes) of `out`.
            unsafe {
                let zero = _mm_setzero_si128();
                let (lo, hi) = (_mm_unpacklo_epi8(v, zero), _mm_unpackhi_epi8(v, zero));
                let dst = out.as_mut_ptr().cast::<__m128i>();
                _mm_storeu_si128(dst, _mm_unpacklo_epi16(lo, zero));
                _mm_storeu_si128(dst.add(1), _mm_unpackhi_epi16(lo, zero));
                _mm_storeu_si128(dst.add(2), _mm_unpacklo_epi16(hi, zero));
                _mm_storeu_si128(dst.add(3), _mm_unpackhi_epi16(hi, zero));
            }
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        widen(block, out)
    }
}

/// The portable `ascii16`.
#[cfg(not(target_arch = "x86_64"))]
fn widen<T: Copy + From<u8>>(block: &[u8; 16], out: &mut [T]) -> bool {
    let ascii = block.is_ascii();
    if let (true, Some(out)) = (ascii, out.get_mut(..16)) {
        for (unit, &byte) in out.iter_mut().zip(block) {
            *unit = T::from(byte);
        }
    }
    ascii
}

/// Write the code points of `text` into `out`: ASCII runs 16 bytes at a time, other code
/// points decoded from their bytes (`text` is UTF-8, so no byte needs checking). The count
/// written, or `None` when `out` is too short.
#[inline(always)]
fn decode<T: Unit>(out: &mut [T], text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let tail = |at: usize| bytes.get(at).map_or(0, |&b| u32::from(b & 0x3f));
    let (mut i, mut o) = (0, 0);
    while let Some(&lead) = bytes.get(i) {
        let (point, len) = match lead {
            0..=0x7f => {
                let block = bytes
                    .get(i..i + 16)
                    .and_then(|b| <&[u8; 16]>::try_from(b).ok());
                if let Some(block) = block {
                    if T::ascii16(block, out.get_mut(o..)?) {
                        i += 16;
                        o += 16;
                        continue;
                    }
                }
                (u32::from(lead), 1)
            }
            0x80..=0xdf => (u32::from(lead & 0x1f) << 6 | tail(i + 1), 2),
            0xe0..=0xef => (
                u32::from(lead & 0x0f) << 12 | tail(i + 1) << 6 | tail(i + 2),
                3,
            ),
            _ => {
                let high = u32::from(lead & 0x07) << 18 | tail(i + 1) << 12;
                (high | tail(i + 2) << 6 | tail(i + 3), 4)
            }
        };
        *out.get_mut(o)? = T::of(point);
        i += len;
        o += 1;
    }
    Some(o)
}

#[cfg(test)]
mod tests {
    use super::{decode, write, Unit};
    use crate::output::{Context, Output};
    use crate::units::Units;

    fn units<T: Unit + Default>(text: &str) -> Vec<T> {
        let mut out = vec![T::default(); text.chars().count()];
        assert_eq!(decode(&mut out, text), Some(out.len()), "{text:?}");
        out
    }

    fn points(text: &str) -> Vec<u32> {
        text.chars().map(u32::from).collect()
    }

    #[test]
    fn decodes_every_width_around_the_ascii_blocks() {
        let ascii = "0123456789abcdef";
        for text in [
            "é".to_owned(),
            format!("{ascii}é"),
            format!("0123456789abcdeé{ascii}ÿ"),
            format!("ÿ{ascii}{ascii}x"),
        ] {
            let got: Vec<u32> = units::<u8>(&text).into_iter().map(u32::from).collect();
            assert_eq!(got, points(&text), "{text:?}");
        }
        for text in [
            format!("日本語 and ß then {ascii}{ascii} Ω"),
            format!("{ascii}\u{800}\u{ffff}\u{100}"),
        ] {
            let got: Vec<u32> = units::<u16>(&text).into_iter().map(u32::from).collect();
            assert_eq!(got, points(&text), "{text:?}");
        }
        for text in [
            format!("😀{ascii}e\u{301}\u{10ffff}\u{80}日"),
            format!("{ascii}{ascii}🚀"),
        ] {
            assert_eq!(units::<u32>(&text), points(&text), "{text:?}");
        }
    }

    #[test]
    fn a_short_buffer_is_refused() {
        let mut out = [0u32; 3];
        assert_eq!(decode(&mut out, "abcé"), None);
        let mut out = [0u16; 20];
        assert_eq!(decode(&mut out, &"a".repeat(21)), None);
    }

    #[test]
    fn writes_text_and_units_in_order() {
        let wide: Vec<u32> = "😀漢".chars().map(u32::from).collect();
        let two: Vec<u16> = "Ωß"
            .chars()
            .map(|c| u16::try_from(u32::from(c)).unwrap_or(0))
            .collect();
        let mut c = Context::default();
        c.push_str("a\u{e9}");
        c.push_units(Units::Four(&wide));
        c.push_str(&"x".repeat(20));
        c.push_units(Units::Two(&two));
        let whole = c.to_utf8();
        let mut out = vec![0u32; whole.chars().count()];
        assert_eq!(write(&mut out, &c), Some((out.len(), false)));
        assert_eq!(out, points(&whole));
        let mut short = vec![0u32; out.len() - 1];
        assert_eq!(write(&mut short, &c), None);
    }

    #[test]
    fn a_surrogate_is_seen_as_it_is_copied() {
        let lone: Vec<u16> = vec![0x41, 0xd83d, 0x42];
        let wide: Vec<u32> = vec![0x1f600, 0xdfff];
        for (units, found) in [
            (Units::Two(&lone), true),
            (Units::Four(&wide), true),
            (Units::Four(&wide[..1]), false),
            (Units::One(&[0xd8, 0x41]), false),
        ] {
            let mut c = Context::default();
            c.push_str("x");
            c.push_units(units);
            let mut out = vec![0u32; 1 + units.len()];
            assert_eq!(write(&mut out, &c), Some((out.len(), found)), "{units:?}");
        }
    }
}
