//! The map's byte form (docs/formats.md, "Cluster map"): a fixed header, the
//! map as postcard, and a CRC32C over both. Used on disk (snapshots) and on
//! the wire (map fetches).

use crate::map::ClusterMap;

/// `SMAP` read as a little-endian u32.
pub const MAP_MAGIC: u32 = u32::from_le_bytes(*b"SMAP");
/// Current version of the layout. Version 2 added the read-only stores'
/// section; version 1 maps (without it) still decode.
pub const MAP_VERSION: u16 = 2;
const HEADER: usize = 4 + 2 + 2 + 8 + 4;

/// Why bytes are not a map.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// Shorter than its header or its stated length.
    #[error("cluster map truncated: {0} bytes")]
    Truncated(usize),
    /// Not a map.
    #[error("not a cluster map (magic {0:#010x})")]
    BadMagic(u32),
    /// A version this build does not read.
    #[error("cluster map version {0} is not supported (this build reads {MAP_VERSION})")]
    Version(u16),
    /// The checksum does not match.
    #[error("cluster map checksum mismatch")]
    Checksum,
    /// The payload does not decode.
    #[error("cluster map payload invalid: {0}")]
    Payload(String),
}

/// A version 1 map: before the read-only stores' section.
#[derive(serde::Deserialize)]
struct MapV1 {
    epoch: u64,
    nodes: std::collections::BTreeMap<crate::map::NodeId, crate::map::Node>,
    partitions: std::collections::BTreeMap<strata_types::PartitionId, crate::map::Partition>,
    policies: strata_types::Policies,
}

/// Encodes a map.
pub fn encode_map(map: &ClusterMap) -> Vec<u8> {
    let payload = postcard::to_stdvec(map).expect("a map always serializes");
    let mut out = Vec::with_capacity(HEADER + payload.len() + 4);
    out.extend_from_slice(&MAP_MAGIC.to_le_bytes());
    out.extend_from_slice(&MAP_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&map.epoch.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes and checks a map.
pub fn decode_map(b: &[u8]) -> Result<ClusterMap, CodecError> {
    if b.len() < HEADER + 4 {
        return Err(CodecError::Truncated(b.len()));
    }
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let magic = u32_at(0);
    if magic != MAP_MAGIC {
        return Err(CodecError::BadMagic(magic));
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if version != MAP_VERSION && version != 1 {
        return Err(CodecError::Version(version));
    }
    let len = u32_at(16) as usize;
    if b.len() != HEADER + len + 4 {
        return Err(CodecError::Truncated(b.len()));
    }
    if crc32c::crc32c(&b[..HEADER + len]) != u32_at(HEADER + len) {
        return Err(CodecError::Checksum);
    }
    let payload = &b[HEADER..HEADER + len];
    let map: ClusterMap = if version == 1 {
        let v1: MapV1 = postcard::from_bytes(payload).map_err(|e| CodecError::Payload(e.to_string()))?;
        ClusterMap { epoch: v1.epoch, nodes: v1.nodes, partitions: v1.partitions, policies: v1.policies, kv: Default::default() }
    } else {
        postcard::from_bytes(payload).map_err(|e| CodecError::Payload(e.to_string()))?
    };
    let epoch = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    if map.epoch != epoch {
        return Err(CodecError::Payload(format!("header epoch {epoch} differs from the map's {}", map.epoch)));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::{Disk, DiskState, Node, Partition, PartitionState, ReplicaLoc};

    /// The issue's size bound: a 1,000-disk, 10,000-partition map serializes
    /// in well under 10 MB (100 nodes of 10 disks in 3 zones, 9 replicas per
    /// partition).
    #[test]
    fn a_large_map_is_small() {
        let mut m = ClusterMap { epoch: 77, ..Default::default() };
        for id in 0..100u64 {
            let disks = (0..10).map(|d| Disk { path: format!("/data/disk{d}"), capacity_bytes: 4 << 40, state: DiskState::Up }).collect();
            m.nodes.insert(
                id,
                Node { id, addr: format!("10.0.{}.{}:7000", id / 250, id % 250), zone: format!("zone-{}", id % 3), rack: format!("rack-{}", id % 20), disks },
            );
        }
        for id in 0..10_000u64 {
            let replicas = (0..9).map(|i| ReplicaLoc { node: (id * 7 + i * 11) % 100, disk: ((id + i) % 10) as u32 }).collect();
            m.partitions.insert(id, Partition { id, state: PartitionState::ReadWrite, capacity_bytes: 100 << 30, replicas });
        }
        let b = encode_map(&m);
        assert!(b.len() < 1 << 20, "{} bytes", b.len());
        assert_eq!(decode_map(&b).unwrap(), m);
    }

    #[test]
    fn damage_is_detected() {
        let mut m = ClusterMap::default();
        m.apply(&crate::Command::AddNode { id: 1, addr: "a:1".into(), zone: "z".into(), rack: "r".into() });
        let b = encode_map(&m);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(decode_map(&c).is_err(), "flip at {i} not caught");
        }
        assert_eq!(decode_map(&b[..b.len() - 1]), Err(CodecError::Truncated(b.len() - 1)));
    }

    /// A version 1 map (before the read-only section), as old snapshots
    /// hold it, still decodes, with no ring and no stores.
    #[test]
    fn version_1_maps_decode() {
        #[derive(serde::Serialize)]
        struct V1<'a> {
            epoch: u64,
            nodes: &'a std::collections::BTreeMap<crate::map::NodeId, crate::map::Node>,
            partitions: &'a std::collections::BTreeMap<strata_types::PartitionId, crate::map::Partition>,
            policies: strata_types::Policies,
        }
        let mut m = ClusterMap::default();
        m.apply(&crate::Command::AddNode { id: 1, addr: "a:1".into(), zone: "z".into(), rack: "r".into() });
        let payload = postcard::to_stdvec(&V1 { epoch: m.epoch, nodes: &m.nodes, partitions: &m.partitions, policies: m.policies }).unwrap();
        let mut b = Vec::new();
        b.extend_from_slice(&MAP_MAGIC.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&m.epoch.to_le_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&payload);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_map(&b).unwrap(), m);
        // And the current version round-trips the read-only section.
        m.apply(&crate::Command::KvInitRing { partitions: 4 });
        assert_eq!(m.kv.ring, vec![1; 4]);
        assert_eq!(decode_map(&encode_map(&m)).unwrap(), m);
    }
}
