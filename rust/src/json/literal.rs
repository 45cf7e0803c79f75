//! The inside of a JSON string literal, checked and measured up to its closing quote.
//!
//! Tool outputs escape a newline on every line, so a long literal is a run of short texts
//! between escapes. Stopping at each escape and searching again from there costs a search set-up
//! (and a mispredicted loop exit) per line. Here each 64-byte block is classified once into bit
//! masks (quotes, backslashes, control characters, UTF-8 continuation bytes); the escapes of a
//! block are then walked on its backslash mask, with no second look at the text between them.

use super::unescape::hex4;

/// What a literal holds, scanned to its closing quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Literal {
    /// index of the closing quote
    pub end: usize,
    /// code points once decoded
    pub chars: usize,
    /// has backslash escapes
    pub escaped: bool,
    /// has `\uXXXX` escapes (which may spell any character)
    pub unicode: bool,
}

/// Why a literal is not valid JSON, and the index the fault is reported at.
pub type Fault = (&'static str, usize);

/// Scan the literal whose inside starts at `start` (just after its opening quote).
///
/// The faults, in the order they are met: an invalid escape (at its backslash), a missing
/// closing quote (at the end of the input); then, for a literal that is otherwise complete, the
/// first control character in it.
pub fn scan(b: &[u8], start: usize) -> Result<Literal, Fault> {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512::available() {
            // SAFETY: the CPU has the features `avx512::scan` is compiled for (checked just
            // above).
            return unsafe { avx512::scan(b, start) };
        }
        if avx2::available() {
            // SAFETY: the CPU has the features `avx2::scan` is compiled for (checked just above).
            return unsafe { avx2::scan(b, start) };
        }
        scan_with::<sse2::Kernel>(b, start)
    }
    #[cfg(not(target_arch = "x86_64"))]
    scan_with::<Portable>(b, start)
}

/// How a block of bytes becomes `Masks`.
trait Kernel {
    /// The masks of the first 16 bytes of `block` (all clear when it has fewer): SSE2 on every
    /// x86_64 CPU.
    #[inline(always)]
    fn of16(block: &[u8]) -> Masks {
        #[cfg(target_arch = "x86_64")]
        {
            sse2::masks16(block)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Masks::portable(block.get(..16).unwrap_or(&[]))
        }
    }
    /// The masks of the first 64 bytes of `block`, which has at least 64.
    fn of64(block: &[u8]) -> Masks;
}

/// A byte at a time, where there is no vector kernel.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
struct Portable;

impl Kernel for Portable {
    fn of64(block: &[u8]) -> Masks {
        Masks::portable(block)
    }
}

#[inline(always)]
fn scan_with<K: Kernel>(b: &[u8], start: usize) -> Result<Literal, Fault> {
    let mut s = Scan::new(start);
    // Keys, ids and short values end in their first 16 bytes, with no escape.
    if let Some(block) = b.get(start..start + 16) {
        let m = K::of16(block);
        let stops = m.quote | m.backslash;
        let first = stops & stops.wrapping_neg();
        if m.quote & first != 0 {
            let within = first - 1;
            s.take(&m, within);
            s.i += first.trailing_zeros() as usize;
            return s.finish(start);
        }
    }
    while let Some(block) = b.get(s.i..s.i + 64) {
        let m = K::of64(block);
        let mut backslashes = m.backslash;
        let mut quotes = m.quote;
        // bytes of this block the literal has used up, and whether it ends in them
        let mut used = 64;
        let mut closed = false;
        loop {
            let quote = quotes.trailing_zeros() as usize;
            let escape = backslashes.trailing_zeros() as usize;
            if quote < escape {
                used = quote;
                closed = true;
                break;
            }
            if escape >= 64 {
                break;
            }
            let len = s.escape(b, s.i + escape)?;
            // the escape's bytes (its `\"` or `\\` among them) are no quote nor backslash
            let covered = bits_from(escape) & !bits_from(escape + len);
            backslashes &= !covered;
            quotes &= !covered;
            if escape + len >= 64 {
                used = escape + len;
                break;
            }
        }
        // escapes are ASCII and no control characters: only the text between them counts
        s.take(&m, bits_from(0) & !bits_from(used));
        s.i += used;
        if closed {
            return s.finish(start);
        }
    }
    // The last bytes of the document, between escapes.
    loop {
        let rest = b.get(s.i..).unwrap_or(&[]);
        let run = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
        let text = rest.get(..run).unwrap_or(&[]);
        s.cont += text.iter().filter(|&&c| c & 0xc0 == 0x80).count();
        if s.control.is_none() {
            s.control = text.iter().position(|&c| c < 0x20).map(|at| s.i + at);
        }
        s.i += run;
        match b.get(s.i) {
            None => return Err(("unterminated string", s.i)),
            Some(b'"') => return s.finish(start),
            Some(_) => s.i += s.escape(b, s.i)?,
        }
    }
}

/// The state of one scan.
struct Scan {
    /// where the scan stands
    i: usize,
    /// bytes the escapes remove once decoded
    shrink: usize,
    /// UTF-8 continuation bytes
    cont: usize,
    /// the first control character
    control: Option<usize>,
    escaped: bool,
    unicode: bool,
}

impl Scan {
    fn new(start: usize) -> Self {
        Scan {
            i: start,
            shrink: 0,
            cont: 0,
            control: None,
            escaped: false,
            unicode: false,
        }
    }

    /// Count the continuation bytes and note the first control character among the bytes of
    /// `within` of a block that starts at `self.i`.
    fn take(&mut self, m: &Masks, within: u64) {
        self.cont += (m.cont & within).count_ones() as usize;
        let control = m.control & within;
        if self.control.is_none() && control != 0 {
            self.control = Some(self.i + control.trailing_zeros() as usize);
        }
    }

    /// The escape whose backslash is at `at`: checked, and its length in bytes.
    #[inline(always)]
    fn escape(&mut self, b: &[u8], at: usize) -> Result<usize, Fault> {
        self.escaped = true;
        match b.get(at + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.shrink += 1;
                Ok(2)
            }
            Some(b'u') => {
                self.unicode = true;
                match hex4(b.get(at + 2..).unwrap_or(&[])) {
                    Some(0xd800..=0xdbff) => {
                        let low = b.get(at + 6) == Some(&b'\\')
                            && b.get(at + 7) == Some(&b'u')
                            && matches!(
                                hex4(b.get(at + 8..).unwrap_or(&[])),
                                Some(0xdc00..=0xdfff)
                            );
                        if !low {
                            return Err(("lone surrogate in a string escape", at));
                        }
                        self.shrink += 11;
                        Ok(12)
                    }
                    Some(0xdc00..=0xdfff) => Err(("lone surrogate in a string escape", at)),
                    Some(_) => {
                        self.shrink += 5;
                        Ok(6)
                    }
                    None => Err(("invalid \\uXXXX escape", at)),
                }
            }
            _ => Err(("invalid escape", at)),
        }
    }

    /// The literal, its closing quote at `self.i`, unless it has a control character.
    fn finish(self, start: usize) -> Result<Literal, Fault> {
        if let Some(at) = self.control {
            return Err(("invalid control character in a string", at));
        }
        Ok(Literal {
            end: self.i,
            chars: (self.i - start) - self.cont - self.shrink,
            escaped: self.escaped,
            unicode: self.unicode,
        })
    }
}

/// Bits `n..64` (none for `n >= 64`).
fn bits_from(n: usize) -> u64 {
    u64::MAX.checked_shl(n as u32).unwrap_or(0)
}

/// One bit per byte of a block: bit `k` for byte `k`.
#[derive(Default)]
struct Masks {
    quote: u64,
    backslash: u64,
    /// bytes below 0x20
    control: u64,
    /// bytes 0x80..=0xbf
    cont: u64,
}

impl Masks {
    /// The masks of up to 64 bytes, a byte at a time.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn portable(block: &[u8]) -> Masks {
        let mut m = Masks::default();
        for (k, &c) in block.iter().take(64).enumerate() {
            let bit = 1u64 << k;
            m.quote |= if c == b'"' { bit } else { 0 };
            m.backslash |= if c == b'\\' { bit } else { 0 };
            m.control |= if c < 0x20 { bit } else { 0 };
            m.cont |= if c & 0xc0 == 0x80 { bit } else { 0 };
        }
        m
    }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::Masks;
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8,
        _mm_set1_epi8,
    };

    /// SSE2, part of every x86_64 target.
    pub struct Kernel;

    impl super::Kernel for Kernel {
        #[inline(always)]
        fn of64(block: &[u8]) -> Masks {
            let lanes = [0, 16, 32, 48].map(|at| masks16(block.get(at..).unwrap_or(&[])));
            let mut m = Masks::default();
            for (n, lane) in lanes.iter().enumerate() {
                let shift = 16 * n as u32;
                m.quote |= lane.quote << shift;
                m.backslash |= lane.backslash << shift;
                m.control |= lane.control << shift;
                m.cont |= lane.cont << shift;
            }
            m
        }
    }

    /// The masks of the first 16 bytes of `block` (all clear when it has fewer).
    #[inline(always)]
    pub fn masks16(block: &[u8]) -> Masks {
        let Some(block) = block.get(..16) else {
            return Masks::default();
        };
        // SAFETY: `block` is 16 readable bytes; SSE2 is part of every x86_64 target.
        unsafe {
            let v = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
            let bits = |m: __m128i| u64::from(_mm_movemask_epi8(m) as u16);
            let low = _mm_set1_epi8(0x1f);
            let top = _mm_and_si128(v, _mm_set1_epi8(0xc0u8 as i8));
            Masks {
                quote: bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8))),
                backslash: bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8))),
                // unsigned `byte <= 0x1f`: the maximum with 0x1f is 0x1f
                control: bits(_mm_cmpeq_epi8(_mm_max_epu8(v, low), low)),
                cont: bits(_mm_cmpeq_epi8(top, _mm_set1_epi8(0x80u8 as i8))),
            }
        }
    }
}

/// Whether the CPU has some features: `ask`ed once, then one load per literal (`slot`: 0 not
/// asked yet, 1 no, 2 yes).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn cpu_has(slot: &std::sync::atomic::AtomicU8, ask: fn() -> bool) -> bool {
    use std::sync::atomic::Ordering;
    match slot.load(Ordering::Relaxed) {
        0 => {
            let yes = ask();
            slot.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
        known => known == 2,
    }
}

/// AVX-512 (BW), whose compares give the 64-bit masks directly, where the CPU has it.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{scan_with, Fault, Literal, Masks};
    use std::arch::x86_64::{
        _mm512_and_si512, _mm512_cmpeq_epi8_mask, _mm512_cmplt_epu8_mask, _mm512_loadu_si512,
        _mm512_set1_epi8,
    };
    use std::sync::atomic::AtomicU8;

    /// Whether the CPU has AVX-512 F and BW, POPCNT and BMI1.
    #[inline(always)]
    pub fn available() -> bool {
        static AVAILABLE: AtomicU8 = AtomicU8::new(0);
        super::cpu_has(&AVAILABLE, || {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("popcnt")
                && std::arch::is_x86_feature_detected!("bmi1")
        })
    }

    /// # Safety
    /// The CPU must have AVX-512 F and BW, POPCNT and BMI1 (`available`).
    #[target_feature(enable = "avx512f,avx512bw,popcnt,bmi1")]
    pub unsafe fn scan(b: &[u8], start: usize) -> Result<Literal, Fault> {
        scan_with::<Kernel>(b, start)
    }

    pub struct Kernel;

    impl super::Kernel for Kernel {
        #[inline(always)]
        fn of64(block: &[u8]) -> Masks {
            let Some(block) = block.get(..64) else {
                return Masks::default();
            };
            // SAFETY: `block` is 64 readable bytes; this runs only inside `scan`, on a CPU
            // with AVX-512 F and BW.
            unsafe {
                let v = _mm512_loadu_si512(block.as_ptr().cast());
                let top = _mm512_and_si512(v, _mm512_set1_epi8(0xc0u8 as i8));
                Masks {
                    quote: _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(b'"' as i8)),
                    backslash: _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(b'\\' as i8)),
                    control: _mm512_cmplt_epu8_mask(v, _mm512_set1_epi8(0x20)),
                    cont: _mm512_cmpeq_epi8_mask(top, _mm512_set1_epi8(0x80u8 as i8)),
                }
            }
        }
    }
}

/// AVX2, with the bit-count and trailing-zero instructions, where the CPU has them.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{scan_with, Fault, Literal, Masks};
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_max_epu8,
        _mm256_movemask_epi8, _mm256_set1_epi8,
    };
    use std::sync::atomic::AtomicU8;

    /// Whether the CPU has AVX2, POPCNT and BMI1.
    #[inline(always)]
    pub fn available() -> bool {
        static AVAILABLE: AtomicU8 = AtomicU8::new(0);
        super::cpu_has(&AVAILABLE, || {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("popcnt")
                && std::arch::is_x86_feature_detected!("bmi1")
        })
    }

    /// # Safety
    /// The CPU must have AVX2, POPCNT and BMI1 (`available`).
    #[target_feature(enable = "avx2,popcnt,bmi1")]
    pub unsafe fn scan(b: &[u8], start: usize) -> Result<Literal, Fault> {
        scan_with::<Kernel>(b, start)
    }

    pub struct Kernel;

    impl super::Kernel for Kernel {
        #[inline(always)]
        fn of64(block: &[u8]) -> Masks {
            let Some(block) = block.get(..64) else {
                return Masks::default();
            };
            // SAFETY: `block` is 64 readable bytes; this runs only inside `scan`, on a CPU
            // with AVX2.
            unsafe {
                let at = block.as_ptr().cast::<__m256i>();
                let (lo, hi) = (_mm256_loadu_si256(at), _mm256_loadu_si256(at.add(1)));
                let mask = |f: &dyn Fn(__m256i) -> __m256i| {
                    let bits = |v| u64::from(_mm256_movemask_epi8(f(v)) as u32);
                    bits(lo) | bits(hi) << 32
                };
                let quote = _mm256_set1_epi8(b'"' as i8);
                let backslash = _mm256_set1_epi8(b'\\' as i8);
                let low = _mm256_set1_epi8(0x1f);
                let top = _mm256_set1_epi8(0xc0u8 as i8);
                let cont = _mm256_set1_epi8(0x80u8 as i8);
                Masks {
                    quote: mask(&|v| _mm256_cmpeq_epi8(v, quote)),
                    backslash: mask(&|v| _mm256_cmpeq_epi8(v, backslash)),
                    control: mask(&|v| _mm256_cmpeq_epi8(_mm256_max_epu8(v, low), low)),
                    cont: mask(&|v| _mm256_cmpeq_epi8(_mm256_and_si256(v, top), cont)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `scan` must give, a byte at a time.
    fn slow(b: &[u8], start: usize) -> Result<Literal, Fault> {
        let mut s = Scan::new(start);
        loop {
            match b.get(s.i) {
                None => return Err(("unterminated string", s.i)),
                Some(b'"') => return s.finish(start),
                Some(b'\\') => s.i += s.escape(b, s.i)?,
                Some(&c) => {
                    s.cont += usize::from(c & 0xc0 == 0x80);
                    if c < 0x20 && s.control.is_none() {
                        s.control = Some(s.i);
                    }
                    s.i += 1;
                }
            }
        }
    }

    fn same(a: &Masks, b: &Masks) -> bool {
        (a.quote, a.backslash, a.control, a.cont) == (b.quote, b.backslash, b.control, b.cont)
    }

    #[test]
    fn masks_match_the_portable_ones() {
        let bytes: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
        for at in 0..bytes.len() - 64 {
            let block = &bytes[at..at + 64];
            let portable = Masks::portable(block);
            assert!(same(&sse2::Kernel::of64(block), &portable));
            let short = Masks::portable(&block[..16]);
            assert!(same(&sse2::Kernel::of16(block), &short));
            if avx2::available() {
                // SAFETY: the CPU has AVX2 (checked just above).
                let fast = unsafe { avx2_of64(block) };
                assert!(same(&fast, &portable));
            }
            if avx512::available() {
                // SAFETY: the CPU has AVX-512 F and BW (checked just above).
                let fast = unsafe { avx512_of64(block) };
                assert!(same(&fast, &portable));
            }
        }
    }

    #[target_feature(enable = "avx2,popcnt,bmi1")]
    unsafe fn avx2_of64(block: &[u8]) -> Masks {
        <avx2::Kernel as Kernel>::of64(block)
    }

    #[target_feature(enable = "avx512f,avx512bw,popcnt,bmi1")]
    unsafe fn avx512_of64(block: &[u8]) -> Masks {
        <avx512::Kernel as Kernel>::of64(block)
    }

    /// Every piece at every offset around the block edges and the short-string check.
    #[test]
    fn scan_agrees_with_a_byte_at_a_time() {
        let pieces: [&[u8]; 14] = [
            b"\\n",
            b"\\\\",
            b"\\\"",
            b"\\u00e9",
            b"\\ud83d\\ude00",
            "é".as_bytes(),
            "😀".as_bytes(),
            b"\\x",
            b"\\u12",
            b"\\ud83d",
            b"\\udc00",
            b"\x01",
            b"\\",
            b"\"",
        ];
        for piece in pieces {
            for before in 0..80 {
                for after in [0, 1, 2, 15, 16, 17, 63, 64, 65] {
                    let mut doc = b"\"".to_vec();
                    doc.extend(std::iter::repeat_n(b'a', before));
                    doc.extend_from_slice(piece);
                    doc.extend(std::iter::repeat_n(b'b', after));
                    for end in [&b"\""[..], b"\"xyz", b""] {
                        let mut full = doc.clone();
                        full.extend_from_slice(end);
                        let expected = slow(&full, 1);
                        let text = String::from_utf8_lossy(&full);
                        assert_eq!(scan(&full, 1), expected, "{text:?}");
                        assert_eq!(scan_with::<sse2::Kernel>(&full, 1), expected, "{text:?}");
                        if avx2::available() {
                            // SAFETY: the CPU has what `avx2::scan` needs (checked).
                            assert_eq!(unsafe { avx2::scan(&full, 1) }, expected, "{text:?}");
                        }
                        assert_eq!(scan_with::<Portable>(&full, 1), expected, "{text:?}");
                    }
                }
            }
        }
    }
}
