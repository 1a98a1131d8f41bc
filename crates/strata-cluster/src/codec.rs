//! The map's byte form (docs/formats.md, "Cluster map"): a fixed header, the
//! map as postcard, and a CRC32C over both. Used on disk (snapshots) and on
//! the wire (map fetches).

use crate::map::ClusterMap;

/// `SMAP` read as a little-endian u32.
pub const MAP_MAGIC: u32 = u32::from_le_bytes(*b"SMAP");
/// Current version of the layout. Version 5 added partition kinds and
/// versions and the tract locator table; version 4 the read-write stores;
/// version 3 node states (up, or down since when, being removed), failed
/// and removed disks, replica moves and the rebalancing under way;
/// version 2 the read-only stores' section. Versions 1 to 4 still decode.
pub const MAP_VERSION: u16 = 5;
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

/// A node as versions 1 and 2 hold it: no state (every node was up).
#[derive(serde::Deserialize)]
struct NodeV2 {
    id: crate::map::NodeId,
    addr: String,
    zone: String,
    rack: String,
    disks: Vec<crate::map::Disk>,
}

/// A partition as versions 1 and 2 hold it: no move under way.
#[derive(serde::Deserialize)]
struct PartitionV2 {
    id: strata_types::PartitionId,
    state: crate::map::PartitionState,
    capacity_bytes: u64,
    replicas: Vec<crate::map::ReplicaLoc>,
}

/// A version 1 map: before the read-only stores' section.
#[derive(serde::Deserialize)]
struct MapV1 {
    epoch: u64,
    nodes: std::collections::BTreeMap<crate::map::NodeId, NodeV2>,
    partitions: std::collections::BTreeMap<strata_types::PartitionId, PartitionV2>,
    policies: strata_types::Policies,
}

/// A version 2 map: before node states and moves.
#[derive(serde::Deserialize)]
struct MapV2 {
    epoch: u64,
    nodes: std::collections::BTreeMap<crate::map::NodeId, NodeV2>,
    partitions: std::collections::BTreeMap<strata_types::PartitionId, PartitionV2>,
    policies: strata_types::Policies,
    kv: crate::kv::KvSection,
}

/// A partition as versions 3 and 4 hold it: no kind (every partition held
/// blobs), no version.
#[derive(serde::Deserialize, serde::Serialize)]
struct PartitionV4 {
    id: strata_types::PartitionId,
    state: crate::map::PartitionState,
    capacity_bytes: u64,
    replicas: Vec<crate::map::ReplicaLoc>,
    moving: Option<crate::map::Move>,
}

type PartitionsV4 = std::collections::BTreeMap<strata_types::PartitionId, PartitionV4>;

fn upgrade_partitions(partitions: PartitionsV4) -> std::collections::BTreeMap<strata_types::PartitionId, crate::map::Partition> {
    partitions
        .into_iter()
        .map(|(k, p)| {
            let mut q = crate::map::Partition::new(p.id, p.capacity_bytes, p.replicas, crate::map::PartitionKind::Blob);
            (q.state, q.moving) = (p.state, p.moving);
            (k, q)
        })
        .collect()
}

/// A version 3 map: before the read-write stores.
#[derive(serde::Deserialize)]
struct MapV3 {
    epoch: u64,
    nodes: std::collections::BTreeMap<crate::map::NodeId, crate::map::Node>,
    partitions: PartitionsV4,
    policies: strata_types::Policies,
    kv: crate::kv::KvSection,
    rebalance: Option<crate::map::Rebalance>,
}

/// A version 4 map: before partition kinds and the tract locator table.
#[derive(serde::Deserialize)]
struct MapV4 {
    epoch: u64,
    nodes: std::collections::BTreeMap<crate::map::NodeId, crate::map::Node>,
    partitions: PartitionsV4,
    policies: strata_types::Policies,
    kv: crate::kv::KvSection,
    rebalance: Option<crate::map::Rebalance>,
    rw_stores: std::collections::BTreeMap<String, crate::kv::RwStoreSpec>,
}

impl MapV4 {
    /// The current map: blob partitions at version 0, no tract table.
    fn upgrade(self) -> ClusterMap {
        ClusterMap {
            epoch: self.epoch,
            nodes: self.nodes,
            partitions: upgrade_partitions(self.partitions),
            policies: self.policies,
            kv: self.kv,
            rebalance: self.rebalance,
            rw_stores: self.rw_stores,
            tracts: None,
        }
    }
}

fn upgrade(
    epoch: u64,
    nodes: std::collections::BTreeMap<crate::map::NodeId, NodeV2>,
    partitions: std::collections::BTreeMap<strata_types::PartitionId, PartitionV2>,
    policies: strata_types::Policies,
    kv: crate::kv::KvSection,
) -> ClusterMap {
    use crate::map::{Node, NodeState, Partition};
    let nodes = nodes
        .into_iter()
        .map(|(k, n)| (k, Node { id: n.id, addr: n.addr, zone: n.zone, rack: n.rack, disks: n.disks, state: NodeState::Up, removing: false }))
        .collect();
    let partitions = partitions
        .into_iter()
        .map(|(k, p)| {
            let mut q = Partition::new(p.id, p.capacity_bytes, p.replicas, crate::map::PartitionKind::Blob);
            q.state = p.state;
            (k, q)
        })
        .collect();
    ClusterMap { epoch, nodes, partitions, policies, kv, rebalance: None, rw_stores: Default::default(), tracts: None }
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
    if !(1..=MAP_VERSION).contains(&version) {
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
    let bad = |e: postcard::Error| CodecError::Payload(e.to_string());
    let map: ClusterMap = match version {
        1 => {
            let v: MapV1 = postcard::from_bytes(payload).map_err(bad)?;
            upgrade(v.epoch, v.nodes, v.partitions, v.policies, Default::default())
        }
        2 => {
            let v: MapV2 = postcard::from_bytes(payload).map_err(bad)?;
            upgrade(v.epoch, v.nodes, v.partitions, v.policies, v.kv)
        }
        3 => {
            let v: MapV3 = postcard::from_bytes(payload).map_err(bad)?;
            let MapV3 { epoch, nodes, partitions, policies, kv, rebalance } = v;
            MapV4 { epoch, nodes, partitions, policies, kv, rebalance, rw_stores: Default::default() }.upgrade()
        }
        4 => postcard::from_bytes::<MapV4>(payload).map_err(bad)?.upgrade(),
        _ => postcard::from_bytes(payload).map_err(bad)?,
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
                Node {
                    id,
                    addr: format!("10.0.{}.{}:7000", id / 250, id % 250),
                    zone: format!("zone-{}", id % 3),
                    rack: format!("rack-{}", id % 20),
                    disks,
                    state: crate::map::NodeState::Up,
                    removing: false,
                },
            );
        }
        for id in 0..10_000u64 {
            let replicas = (0..9).map(|i| ReplicaLoc { node: (id * 7 + i * 11) % 100, disk: ((id + i) % 10) as u32 }).collect();
            m.partitions.insert(id, Partition::new(id, 100 << 30, replicas, crate::map::PartitionKind::Blob));
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
            nodes: &'a std::collections::BTreeMap<crate::map::NodeId, NodeV2Out>,
            partitions: &'a std::collections::BTreeMap<strata_types::PartitionId, PartitionV2Out>,
            policies: strata_types::Policies,
        }
        let mut m = ClusterMap::default();
        m.apply(&crate::Command::AddNode { id: 1, addr: "a:1".into(), zone: "z".into(), rack: "r".into() });
        m.apply(&crate::Command::AddDisk { node: 1, path: "d".into(), capacity_bytes: 1 << 30 });
        m.apply(&crate::Command::AddPartitions { count: 2, replicas_per_zone: 1, capacity_bytes: 1 << 20 });
        let (nodes, partitions) = v2_parts(&m);
        let payload = postcard::to_stdvec(&V1 { epoch: m.epoch, nodes: &nodes, partitions: &partitions, policies: m.policies }).unwrap();
        assert_eq!(decode_map(&framed(1, m.epoch, &payload)).unwrap(), without_versions(&m));
        // And the current version round-trips the read-only section.
        m.apply(&crate::Command::KvInitRing { partitions: 4 });
        assert_eq!(m.kv.ring, vec![1; 4]);
        assert_eq!(decode_map(&encode_map(&m)).unwrap(), m);
    }

    #[derive(serde::Serialize)]
    struct NodeV2Out {
        id: crate::map::NodeId,
        addr: String,
        zone: String,
        rack: String,
        disks: Vec<Disk>,
    }

    #[derive(serde::Serialize)]
    struct PartitionV2Out {
        id: strata_types::PartitionId,
        state: PartitionState,
        capacity_bytes: u64,
        replicas: Vec<ReplicaLoc>,
    }

    type V2Parts = (std::collections::BTreeMap<crate::map::NodeId, NodeV2Out>, std::collections::BTreeMap<strata_types::PartitionId, PartitionV2Out>);

    fn v2_parts(m: &ClusterMap) -> V2Parts {
        let nodes = m
            .nodes
            .iter()
            .map(|(k, n)| (*k, NodeV2Out { id: n.id, addr: n.addr.clone(), zone: n.zone.clone(), rack: n.rack.clone(), disks: n.disks.clone() }))
            .collect();
        let partitions = m
            .partitions
            .iter()
            .map(|(k, p)| (*k, PartitionV2Out { id: p.id, state: p.state, capacity_bytes: p.capacity_bytes, replicas: p.replicas.clone() }))
            .collect();
        (nodes, partitions)
    }

    fn framed(version: u16, epoch: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&MAP_MAGIC.to_le_bytes());
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&epoch.to_le_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(payload);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// A version 2 map (before node states and moves), as the snapshots
    /// and caches of the previous release hold it, decodes with every
    /// node up and no move; version 3 round-trips both.
    #[test]
    fn version_2_maps_decode() {
        #[derive(serde::Serialize)]
        struct V2<'a> {
            epoch: u64,
            nodes: &'a std::collections::BTreeMap<crate::map::NodeId, NodeV2Out>,
            partitions: &'a std::collections::BTreeMap<strata_types::PartitionId, PartitionV2Out>,
            policies: strata_types::Policies,
            kv: &'a crate::kv::KvSection,
        }
        let mut m = ClusterMap::default();
        for id in 1..=2 {
            m.apply(&crate::Command::AddNode { id, addr: format!("a:{id}"), zone: "z".into(), rack: "r".into() });
            m.apply(&crate::Command::AddDisk { node: id, path: "d".into(), capacity_bytes: 1 << 30 });
        }
        m.apply(&crate::Command::AddPartitions { count: 3, replicas_per_zone: 2, capacity_bytes: 1 << 20 });
        m.apply(&crate::Command::KvInitRing { partitions: 4 });
        let (nodes, partitions) = v2_parts(&m);
        let payload = postcard::to_stdvec(&V2 { epoch: m.epoch, nodes: &nodes, partitions: &partitions, policies: m.policies, kv: &m.kv }).unwrap();
        assert_eq!(decode_map(&framed(2, m.epoch, &payload)).unwrap(), without_versions(&m));
        m.apply(&crate::Command::SetNodeState { node: 2, state: crate::map::NodeState::Down { since_ms: 77 } });
        m.apply(&crate::Command::SetDiskState { node: 1, disk: 0, state: DiskState::Failed });
        assert_eq!(decode_map(&encode_map(&m)).unwrap(), m);
        assert_eq!(m.degraded(), vec![0, 1, 2]);
    }

    /// A version 3 map (before the read-write stores) decodes with none;
    /// the current version round-trips a read-write store.
    #[test]
    fn version_3_maps_decode() {
        #[derive(serde::Serialize)]
        struct V3<'a> {
            epoch: u64,
            nodes: &'a std::collections::BTreeMap<crate::map::NodeId, Node>,
            partitions: &'a PartitionsV4,
            policies: strata_types::Policies,
            kv: &'a crate::kv::KvSection,
            rebalance: &'a Option<crate::map::Rebalance>,
        }
        let mut m = ClusterMap::default();
        for id in 1..=3 {
            m.apply(&crate::Command::AddNode { id, addr: format!("a:{id}"), zone: "z".into(), rack: "r".into() });
        }
        m.apply(&crate::Command::KvInitRing { partitions: 6 });
        let payload = postcard::to_stdvec(&V3 {
            epoch: m.epoch,
            nodes: &m.nodes,
            partitions: &v4_partitions(&m),
            policies: m.policies,
            kv: &m.kv,
            rebalance: &m.rebalance,
        })
        .unwrap();
        assert_eq!(decode_map(&framed(3, m.epoch, &payload)).unwrap(), without_versions(&m));
        let spec = crate::kv::RwStoreSpec { replication: crate::kv::KvReplication::Nodes(3), required_reads: 2, required_writes: 2, value_limit: 1 << 20 };
        assert!(matches!(m.apply(&crate::Command::RwCreateStore { name: "counters".into(), spec: spec.clone() }), crate::Outcome::Applied { .. }));
        assert_eq!(decode_map(&encode_map(&m)).unwrap(), m);
        let pref = m.rw_preference("counters", 0).unwrap();
        assert_eq!(pref.len(), 3);
        // Bad definitions are refused, naming the field.
        for (bad, field) in [
            (crate::kv::RwStoreSpec { required_writes: 4, ..spec.clone() }, "required writes"),
            (crate::kv::RwStoreSpec { required_reads: 0, ..spec.clone() }, "required reads"),
            (crate::kv::RwStoreSpec { value_limit: 0, ..spec.clone() }, "value limit"),
        ] {
            let out = m.apply(&crate::Command::RwCreateStore { name: "other".into(), spec: bad });
            assert!(format!("{out:?}").contains(field), "{out:?}");
        }
        let out = m.apply(&crate::Command::RwCreateStore { name: "counters".into(), spec });
        assert!(format!("{out:?}").contains("exists"), "{out:?}");
    }

    fn v4_partitions(m: &ClusterMap) -> PartitionsV4 {
        m.partitions
            .iter()
            .map(|(k, p)| (*k, PartitionV4 { id: p.id, state: p.state, capacity_bytes: p.capacity_bytes, replicas: p.replicas.clone(), moving: p.moving }))
            .collect()
    }

    /// `m` as an older version decodes it: blob partitions of version 0.
    fn without_versions(m: &ClusterMap) -> ClusterMap {
        let mut m = m.clone();
        for p in m.partitions.values_mut() {
            p.version = 0;
        }
        m
    }

    /// A version 4 map (before partition kinds and the tract table)
    /// decodes with blob partitions and no table; the current version
    /// round-trips a table and its rows.
    #[test]
    fn version_4_maps_decode() {
        #[derive(serde::Serialize)]
        struct V4<'a> {
            epoch: u64,
            nodes: &'a std::collections::BTreeMap<crate::map::NodeId, Node>,
            partitions: &'a PartitionsV4,
            policies: strata_types::Policies,
            kv: &'a crate::kv::KvSection,
            rebalance: &'a Option<crate::map::Rebalance>,
            rw_stores: &'a std::collections::BTreeMap<String, crate::kv::RwStoreSpec>,
        }
        let mut m = ClusterMap::default();
        for id in 1..=3 {
            m.apply(&crate::Command::AddNode { id, addr: format!("a:{id}"), zone: "z".into(), rack: format!("r{id}") });
            m.apply(&crate::Command::AddDisk { node: id, path: "d".into(), capacity_bytes: 1 << 40 });
        }
        m.apply(&crate::Command::AddPartitions { count: 2, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        let payload = postcard::to_stdvec(&V4 {
            epoch: m.epoch,
            nodes: &m.nodes,
            partitions: &v4_partitions(&m),
            policies: m.policies,
            kv: &m.kv,
            rebalance: &m.rebalance,
            rw_stores: &m.rw_stores,
        })
        .unwrap();
        let old = decode_map(&framed(4, m.epoch, &payload)).unwrap();
        assert_eq!(old, without_versions(&m));
        assert!(old.partitions.values().all(|p| p.kind == crate::map::PartitionKind::Blob) && old.tracts.is_none());
        let out = m.apply(&crate::Command::TractInit { tract_bytes: 64 << 10, replicas: 3, scatter: 2, capacity_bytes: 1 << 30, seed: 1 });
        assert!(matches!(out, crate::Outcome::PartitionsAdded { .. }), "{out:?}");
        assert_eq!(decode_map(&encode_map(&m)).unwrap(), m);
    }
}
