//! One needle's search (the cleared marker in every kept result): memchr's filter of a pair
//! of the needle's rarest bytes at their offsets, run 128 candidate starts at a time with
//! AVX-512 BW where the CPU has it, and memchr's own `memmem` elsewhere and for short texts.
//! Every result is searched to its end unless it holds the marker, so this loop reads more
//! text than any other: with AVX2, memchr's loop takes 32 starts at a time.

use memchr::arch::all::packedpair::Pair;
use memchr::memmem;

/// Texts shorter than this go to `memmem` (the vector loop pays off on long ones).
#[cfg(target_arch = "x86_64")]
const VECTOR_FROM: usize = 256;

/// A needle's searchers (`memmem` holds the needle).
pub struct PairFinder {
    memmem: memmem::Finder<'static>,
    /// the offsets of the two bytes the vector loop compares first
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pair: Option<(usize, usize)>,
}

impl PairFinder {
    pub fn new(needle: &[u8]) -> Self {
        Self {
            memmem: memmem::Finder::new(needle).into_owned(),
            pair: Pair::new(needle).map(|p| (usize::from(p.index1()), usize::from(p.index2()))),
        }
    }

    /// The start of the first occurrence of the needle in `hay`.
    pub fn find(&self, hay: &[u8]) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if let Some((first, second)) = self.pair {
            if hay.len() >= VECTOR_FROM
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
            {
                // SAFETY: the CPU has AVX-512 F and BW (checked just above); `Pair` gives
                // offsets inside the needle.
                return unsafe { avx512::find(hay, first, second, &self.memmem) };
            }
        }
        self.memmem.find(hay)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use memchr::memmem;
    use std::arch::x86_64::{_mm512_cmpeq_epi8_mask, _mm512_loadu_si512, _mm512_set1_epi8};

    /// Candidate starts looked at per step.
    const STEP: usize = 128;

    /// The first of the candidate starts `at + bit` (a bit of `mask`) where the needle is.
    #[cold]
    fn verify(hay: &[u8], needle: &[u8], at: usize, mut mask: u64) -> Option<usize> {
        while mask != 0 {
            let start = at + mask.trailing_zeros() as usize;
            if hay.get(start..start + needle.len()) == Some(needle) {
                return Some(start);
            }
            mask &= mask - 1;
        }
        None
    }

    /// # Safety
    /// The CPU must have AVX-512 F and BW; `first` and `second` are offsets inside the
    /// needle of `finder`, which also searches what is left after the last full step.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn find(
        hay: &[u8],
        first: usize,
        second: usize,
        finder: &memmem::Finder<'_>,
    ) -> Option<usize> {
        let needle = finder.needle();
        let (Some(&b1), Some(&b2)) = (needle.get(first), needle.get(second)) else {
            return finder.find(hay);
        };
        let last = hay.len().checked_sub(needle.len())?;
        let v1 = _mm512_set1_epi8(b1 as i8);
        let v2 = _mm512_set1_epi8(b2 as i8);
        let base = hay.as_ptr();
        let mut at = 0;
        // every start of `at..at + STEP` is at most `last`: each load ends at most at
        // `last + offset + 1 <= hay.len()`, the offsets being inside the needle
        while at + STEP <= last + 1 {
            let block = base.add(at);
            let found = |offset: usize| {
                let starts = block.add(offset);
                _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(starts.add(first).cast()), v1)
                    & _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(starts.add(second).cast()), v2)
            };
            let (low, high) = (found(0), found(64));
            if low | high != 0 {
                let hit =
                    verify(hay, needle, at, low).or_else(|| verify(hay, needle, at + 64, high));
                if hit.is_some() {
                    return hit;
                }
            }
            at += STEP;
        }
        finder
            .find(hay.get(at..).unwrap_or(&[]))
            .map(|found| at + found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_occurrence_at_every_place_and_length() {
        let needle = b"[Old tool result content cleared]";
        let finder = PairFinder::new(needle);
        for len in [0, 10, 40, 255, 256, 300, 1000, 1200] {
            // decoys: the pair's bytes at their distance, and the needle less its last byte
            let filler: Vec<u8> = (0..len)
                .map(|i| match i % 97 {
                    0 => b'[',
                    32 => b']',
                    _ => b"abc ]xyz["[i % 9],
                })
                .collect();
            assert_eq!(finder.find(&filler), memmem::find(&filler, needle));
            for at in (0..=len)
                .step_by(7)
                .chain([len.saturating_sub(needle.len())])
            {
                let mut hay = filler.clone();
                hay.splice(at..at, needle[..needle.len() - 1].iter().copied());
                assert_eq!(finder.find(&hay), memmem::find(&hay, needle));
                let mut hay = filler.clone();
                hay.splice(at..at, needle.iter().copied());
                hay.extend_from_slice(needle);
                assert_eq!(finder.find(&hay), Some(at), "len {len} at {at}");
            }
        }
    }

    #[test]
    fn short_needles_and_haystacks() {
        for needle in [&b"a"[..], b"ab", b"error"] {
            let finder = PairFinder::new(needle);
            let mut hay = vec![b'x'; 700];
            assert_eq!(finder.find(&hay), None);
            hay.extend_from_slice(needle);
            assert_eq!(finder.find(&hay), Some(700));
            assert_eq!(finder.find(&hay[..3]), memmem::find(&hay[..3], needle));
        }
    }
}
