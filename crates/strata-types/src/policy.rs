//! Quorum policies: how many replica acks an operation needs. Shared by the
//! router (which applies them) and the cluster map (which holds the
//! cluster's defaults).

/// How many replicas must succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Policy {
    /// Any one replica.
    One,
    /// `k` replicas (capped at the replica count).
    Count(usize),
    /// More than half.
    Majority,
    /// Every replica.
    All,
}

impl Policy {
    /// Acks needed out of `replicas`.
    pub fn needed(self, replicas: usize) -> usize {
        let n = match self {
            Self::One => 1,
            Self::Count(k) => k,
            Self::Majority => replicas / 2 + 1,
            Self::All => replicas,
        };
        n.clamp(1, replicas.max(1))
    }

    /// Parses `one`, `majority`, `all` or a number.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "one" => Some(Self::One),
            "majority" => Some(Self::Majority),
            "all" => Some(Self::All),
            n => n.parse().ok().filter(|&k| k > 0).map(Self::Count),
        }
    }
}

/// Per-operation policies (defaults as Ambry ships them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Policies {
    /// Put acks.
    pub put: Policy,
    /// Replicas asked on get.
    pub get: Policy,
    /// Delete acks.
    pub delete: Policy,
    /// TTL update acks.
    pub ttl_update: Policy,
}

impl Default for Policies {
    fn default() -> Self {
        Self { put: Policy::Count(2), get: Policy::One, delete: Policy::Count(2), ttl_update: Policy::Count(2) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_counts() {
        assert_eq!(Policy::Count(2).needed(3), 2);
        assert_eq!(Policy::Count(2).needed(1), 1);
        assert_eq!(Policy::Majority.needed(3), 2);
        assert_eq!(Policy::Majority.needed(4), 3);
        assert_eq!(Policy::All.needed(3), 3);
        assert_eq!(Policy::parse("2"), Some(Policy::Count(2)));
        assert_eq!(Policy::parse("0"), None);
    }
}
