//! Token ids stored as narrowly as the vocabulary allows: two bytes per token for a
//! vocabulary of at most 65,536 (every char vocabulary of ordinary text, the byte tokenizer,
//! every BPE headlab trains), as nanoGPT's `.bin` files store GPT-2's tokens; four above.
//! Batches still come out as `u32`, so nothing downstream sees the difference.

use std::ops::Range;

/// A split's token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenIds {
    /// Every id below 65,536.
    U16(Vec<u16>),
    /// Any id.
    U32(Vec<u32>),
}

impl TokenIds {
    /// Empty storage that holds any id of a vocabulary of `vocab_size` tokens, with room for
    /// `capacity` of them.
    pub fn for_vocab(vocab_size: usize, capacity: usize) -> Self {
        if vocab_size <= usize::from(u16::MAX) + 1 {
            TokenIds::U16(Vec::with_capacity(capacity))
        } else {
            TokenIds::U32(Vec::with_capacity(capacity))
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        match self {
            TokenIds::U16(v) => v.len(),
            TokenIds::U32(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes each id takes.
    pub fn id_bytes(&self) -> usize {
        match self {
            TokenIds::U16(_) => 2,
            TokenIds::U32(_) => 4,
        }
    }

    /// The id at `index`. Panics past the end, as slice indexing does.
    pub fn get(&self, index: usize) -> u32 {
        match self {
            TokenIds::U16(v) => u32::from(v[index]),
            TokenIds::U32(v) => v[index],
        }
    }

    /// Appends `ids`. Panics on an id the storage cannot hold: [`TokenIds::for_vocab`] picked
    /// it for the vocabulary, so that id came from another tokenizer (a bug, not input).
    pub fn push_all(&mut self, ids: &[u32]) {
        match self {
            TokenIds::U16(v) => v.extend(ids.iter().map(|&id| {
                u16::try_from(id).expect("a token id of a vocabulary of at most 65,536")
            })),
            TokenIds::U32(v) => v.extend_from_slice(ids),
        }
    }

    /// Appends the ids in `range` to `out`.
    pub fn extend_into(&self, range: Range<usize>, out: &mut Vec<u32>) {
        match self {
            TokenIds::U16(v) => out.extend(v[range].iter().map(|&id| u32::from(id))),
            TokenIds::U32(v) => out.extend_from_slice(&v[range]),
        }
    }

    /// The ids in `range`.
    pub fn to_vec(&self, range: Range<usize>) -> Vec<u32> {
        let mut out = Vec::with_capacity(range.len());
        self.extend_into(range, &mut out);
        out
    }

    /// Every id, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let (narrow, wide) = match self {
            TokenIds::U16(v) => (Some(v.iter().map(|&id| u32::from(id))), None),
            TokenIds::U32(v) => (None, Some(v.iter().copied())),
        };
        narrow
            .into_iter()
            .flatten()
            .chain(wide.into_iter().flatten())
    }

    /// Gives back unused capacity.
    pub fn shrink_to_fit(&mut self) {
        match self {
            TokenIds::U16(v) => v.shrink_to_fit(),
            TokenIds::U32(v) => v.shrink_to_fit(),
        }
    }
}

impl From<Vec<u32>> for TokenIds {
    fn from(ids: Vec<u32>) -> Self {
        TokenIds::U32(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_and_wide_storage_give_back_the_same_ids() {
        let ids: Vec<u32> = (0..1000).map(|i| (i * 7919) % 65_536).collect();
        let mut narrow = TokenIds::for_vocab(65_536, 0);
        let mut wide = TokenIds::for_vocab(65_537, 0);
        assert_eq!((narrow.id_bytes(), wide.id_bytes()), (2, 4));
        for chunk in ids.chunks(333) {
            narrow.push_all(chunk);
            wide.push_all(chunk);
        }
        for store in [&narrow, &wide] {
            assert_eq!(store.len(), ids.len());
            assert_eq!(store.iter().collect::<Vec<_>>(), ids);
            assert_eq!(store.to_vec(10..20), ids[10..20]);
            assert_eq!(store.get(999), ids[999]);
        }
    }

    #[test]
    #[should_panic(expected = "at most 65,536")]
    fn an_id_too_wide_for_the_storage_is_a_bug_not_a_silent_wrap() {
        TokenIds::for_vocab(100, 0).push_all(&[70_000]);
    }
}
