//! Blob GUIDs: 128 bits, chosen by the client or drawn at random, written
//! as 32 lower-case hex digits.

use crate::error::TractError;

/// A blob's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// A random GUID (from the OS's generator).
    pub fn random() -> Self {
        let mut b = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut b);
        Self(b)
    }

    /// Parses 32 hex digits.
    pub fn parse(s: &str) -> Result<Self, TractError> {
        let bad = || TractError::Invalid(format!("blob GUID {s:?}: want 32 hex digits"));
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut b = [0u8; 16];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(b))
    }
}

impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_round_trip_and_bad_ones_are_named() {
        let g = Guid::random();
        assert_eq!(Guid::parse(&g.to_string()).unwrap(), g);
        assert_eq!(Guid::parse("000102030405060708090a0b0c0d0e0f").unwrap().0[15], 15);
        for bad in ["", "00", "zz0102030405060708090a0b0c0d0e0f", "000102030405060708090a0b0c0d0e0f00", "é00102030405060708090a0b0c0d0e0"] {
            assert!(Guid::parse(bad).unwrap_err().to_string().contains("32 hex digits"), "{bad:?}");
        }
    }
}
