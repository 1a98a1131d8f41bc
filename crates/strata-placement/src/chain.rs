//! Chain(r), the single-choice baseline of Kinesis §6: one hash function with
//! linear hashing gives the primary `p` among `n` servers; the replicas are
//! `{(p + i) mod n | 0 <= i < r}`.

use crate::ServerId;
use crate::hash::segment_hash;
use crate::linear::bucket;

/// Chain placement over `n` servers.
#[derive(Debug, Clone, Copy)]
pub struct Chain {
    /// Replicas per object.
    pub r: usize,
    /// Servers.
    pub n: usize,
}

impl Chain {
    /// The replica servers of `key`, primary first.
    pub fn replicas(&self, key: &[u8]) -> Vec<ServerId> {
        let p = bucket(segment_hash(key, 0), self.n);
        (0..self.r.min(self.n)).map(|i| (p + i) % self.n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_servers() {
        let c = Chain { r: 3, n: 10 };
        let reps = c.replicas(b"x");
        assert_eq!(reps.len(), 3);
        assert_eq!(reps[1], (reps[0] + 1) % 10);
        assert_eq!(reps[2], (reps[0] + 2) % 10);
    }
}
