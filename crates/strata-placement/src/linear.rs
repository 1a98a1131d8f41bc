//! Linear hashing (Kinesis §3.1.1). With `n` servers and `l = floor(log2 n)`:
//! `h_e(d) = h(d) mod 2^(l+1)` if that is below `n`, else `h(d) mod 2^l`.
//!
//! Seen on the key space, server `i` owns the range starting at the bit
//! reversal of `i`: server 1 splits server 0's range in half, servers 2 and 3
//! split 0's and 1's, and so on. An object sits at the bit reversal of its
//! hash, and belongs to the closest server to its left; that view also gives
//! the failure rule: an object of a faulty server goes to the closest
//! non-faulty server to its left (with 6 servers, 2's objects go to 4).

/// Where server `i`'s key range starts: `i`'s bits reversed into a u64.
pub fn range_start(i: usize) -> u64 {
    (i as u64).reverse_bits()
}

/// The linear-hashing bucket (server index) of hash `h` among `n` servers.
pub fn bucket(h: u64, n: usize) -> usize {
    assert!(n > 0, "linear hashing needs at least one server");
    let l = usize::BITS - 1 - n.leading_zeros(); // floor(log2 n)
    let wide = (h & ((2u64 << l) - 1)) as usize;
    if wide < n { wide } else { (h & ((1u64 << l) - 1)) as usize }
}

/// The server whose key range server `n` splits when it joins: `n - 2^floor(log2 n)`
/// (server 1 splits 0; 2 and 3 split 0 and 1; 4..7 split 0..3; ...).
pub fn split_of(n: usize) -> usize {
    assert!(n > 0, "server 0 splits nothing");
    n - (1usize << (usize::BITS - 1 - n.leading_zeros()))
}

/// A segment's servers in key-space order, for the failure rule.
#[derive(Debug, Clone)]
pub struct KeySpace {
    /// Server indices sorted by where their ranges start.
    by_start: Vec<usize>,
}

impl KeySpace {
    /// The key space of `n` servers.
    pub fn new(n: usize) -> Self {
        let mut by_start: Vec<usize> = (0..n).collect();
        by_start.sort_by_key(|&i| range_start(i));
        Self { by_start }
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.by_start.len()
    }

    /// True when there are no servers.
    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// The server owning hash `h`, skipping faulty servers by walking left
    /// (wrapping around) to the closest non-faulty one. `None` if all are faulty.
    pub fn locate(&self, h: u64, faulty: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.by_start.len();
        let b = bucket(h, n);
        if !faulty(b) {
            return Some(b);
        }
        let pos = self.by_start.iter().position(|&i| i == b).expect("bucket is a server");
        (1..n).map(|step| self.by_start[(pos + n - step) % n]).find(|&i| !faulty(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_the_papers_example() {
        // Six servers: 2 and 3 keep double ranges; if 2 fails its keys go to 4.
        let ks = KeySpace::new(6);
        let starts: Vec<usize> = ks.by_start.clone();
        assert_eq!(starts, vec![0, 4, 2, 1, 5, 3]);
        let h = 2; // bucket 2 (2 mod 8 = 2 < 6)
        assert_eq!(ks.locate(h, |_| false), Some(2));
        assert_eq!(ks.locate(h, |i| i == 2), Some(4));
    }

    proptest! {
        /// The closed formula and the key-space view agree.
        #[test]
        fn formula_is_closest_start_to_the_left(h: u64, n in 1usize..300) {
            let pos = h.reverse_bits();
            let owner = (0..n).filter(|&i| range_start(i) <= pos).max_by_key(|&i| range_start(i)).unwrap();
            prop_assert_eq!(bucket(h, n), owner);
        }

        /// Adding server n moves only keys to server n, and only keys of the
        /// server it splits.
        #[test]
        fn expansion_moves_only_split_keys(h: u64, n in 1usize..300) {
            let (before, after) = (bucket(h, n), bucket(h, n + 1));
            if before != after {
                prop_assert_eq!(after, n);
                prop_assert_eq!(before, split_of(n));
            }
        }

        /// A faulty server's keys go to a non-faulty one; others stay put.
        #[test]
        fn failures_move_only_the_failed_servers_keys(h: u64, n in 2usize..100, f in 0usize..100) {
            let f = f % n;
            let ks = KeySpace::new(n);
            let b = bucket(h, n);
            let located = ks.locate(h, |i| i == f).unwrap();
            prop_assert_ne!(located, f);
            if b != f { prop_assert_eq!(located, b); }
        }
    }
}
