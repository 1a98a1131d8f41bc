//! Quorum policies: how many replica acks an operation needs. Shared by the
//! router (which applies them) and the cluster map (which holds the
//! cluster's defaults).

/// How many replicas must succeed.
///
/// For writes, `One`, `Count`, `Majority` and `All` count the partition's
/// replicas in every zone, and the router waits for other zones' replicas
/// when the local zone cannot give that many acks; `Count(k)` with fewer
/// than `k` replicas cannot be met and fails. `Local(k)` is Ambry's
/// acknowledgement: `k` of the replicas in the router's own zone (all of
/// them if there are fewer), other zones catching up by replication.
/// For gets, the policy is how many replicas are asked at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Policy {
    /// Any one replica.
    One,
    /// `k` replicas.
    Count(usize),
    /// More than half of every replica.
    Majority,
    /// Every replica, in every zone.
    All,
    /// `k` replicas of the local zone (capped at its replica count).
    /// Comes last: the cluster map stores policies by variant position.
    Local(usize),
}

impl Policy {
    /// Acks needed out of `replicas`, capped at `replicas` (at least 1):
    /// the fan-out of gets.
    pub fn needed(self, replicas: usize) -> usize {
        let n = match self {
            Self::One => 1,
            Self::Count(k) | Self::Local(k) => k,
            Self::Majority => replicas / 2 + 1,
            Self::All => replicas,
        };
        n.clamp(1, replicas.max(1))
    }

    /// Whether the policy counts only the local zone's replicas.
    pub fn is_local(self) -> bool {
        matches!(self, Self::Local(_))
    }

    /// Acks a write needs: of `local` replicas for a local policy, else of
    /// `total` replicas in every zone. `Err(needed)` when the policy asks
    /// for more acks than there are replicas.
    pub fn write_acks(self, local: usize, total: usize) -> Result<usize, usize> {
        match self {
            Self::Local(k) => Ok(k.clamp(1, local.max(1))),
            Self::One => Ok(1),
            Self::Majority => Ok(total / 2 + 1),
            Self::All => Ok(total.max(1)),
            Self::Count(k) if k <= total => Ok(k.max(1)),
            Self::Count(k) => Err(k),
        }
    }

    /// Parses `one`, `majority`, `all`, a number, or `local:N`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "one" => Some(Self::One),
            "majority" => Some(Self::Majority),
            "all" => Some(Self::All),
            n => match n.strip_prefix("local:") {
                Some(k) => k.parse().ok().filter(|&k| k > 0).map(Self::Local),
                None => n.parse().ok().filter(|&k| k > 0).map(Self::Count),
            },
        }
    }
}

/// As [`Policy::parse`] reads it.
impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::One => f.write_str("one"),
            Self::Count(k) => write!(f, "{k}"),
            Self::Majority => f.write_str("majority"),
            Self::All => f.write_str("all"),
            Self::Local(k) => write!(f, "local:{k}"),
        }
    }
}

/// Per-operation policies (defaults as Ambry ships them: writes need 2
/// acks of the local zone, gets ask one replica at a time).
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
        Self { put: Policy::Local(2), get: Policy::One, delete: Policy::Local(2), ttl_update: Policy::Local(2) }
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
        assert_eq!(Policy::parse("local:2"), Some(Policy::Local(2)));
        assert_eq!(Policy::parse("local:0"), None);
        for p in [Policy::One, Policy::Count(3), Policy::Majority, Policy::All, Policy::Local(2)] {
            assert_eq!(Policy::parse(&p.to_string()), Some(p));
        }
    }

    /// Global policies count every zone and are never capped below what
    /// they say; the local one is Ambry's, capped at the local zone.
    #[test]
    fn write_acks_mean_what_they_say() {
        // Three zones of one replica each, as in README's cluster.
        assert_eq!(Policy::All.write_acks(1, 3), Ok(3));
        assert_eq!(Policy::Count(3).write_acks(1, 3), Ok(3));
        assert_eq!(Policy::Count(2).write_acks(1, 3), Ok(2));
        assert_eq!(Policy::Majority.write_acks(1, 3), Ok(2));
        assert_eq!(Policy::Count(4).write_acks(1, 3), Err(4));
        assert_eq!(Policy::Local(2).write_acks(1, 3), Ok(1));
        assert_eq!(Policy::Local(2).write_acks(3, 6), Ok(2));
        assert_eq!(Policy::One.write_acks(1, 1), Ok(1));
    }
}
