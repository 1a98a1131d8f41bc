//! A checker of transaction histories for Adya's anomalies (G0, G1a,
//! G1b, G1c, G-single, G2), in the manner of Elle's list-append checker.
//!
//! Clients log every transaction they ran: its operations as they saw
//! them and how it ended (committed, failed, or unknown). Keys are either
//! lists, to which transactions append unique values and which they read
//! whole, or registers, written with unique values and read. A list read
//! reveals the order of every append before it, so the version order of a
//! list is its longest read (every other read must be a prefix of it);
//! a register's order is only known where a transaction read one value
//! and wrote the next.
//!
//! From the version orders come the dependency edges between
//! transactions: write-write (`ww`: installed the next version), write-read
//! (`wr`: read what the other wrote) and read-write (`rw`: read the version
//! the other overwrote). A cycle of `ww` edges is G0; of `ww` and `wr`
//! edges, G1c; with exactly one `rw` edge, G-single; with more, G2. A read
//! of a failed transaction's value is G1a; of a value its writer
//! overwrote in the same transaction, G1b. Each anomaly comes with a
//! witness: the cycle, edge by edge.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// One operation of a transaction, as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MicroOp {
    /// Appended `value` to list `key`.
    Append {
        /// The list.
        key: String,
        /// The value (unique per key over the history).
        value: u64,
    },
    /// Read list `key` whole (`None` when the read's result is unknown).
    Read {
        /// The list.
        key: String,
        /// What it held.
        value: Option<Vec<u64>>,
    },
    /// Wrote `value` to register `key`.
    Write {
        /// The register.
        key: String,
        /// The value (unique per key over the history; 0 is the initial value).
        value: u64,
    },
    /// Read register `key`.
    ReadRegister {
        /// The register.
        key: String,
        /// What it held (0: never written), `None` when unknown.
        value: Option<u64>,
    },
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// Committed.
    Ok,
    /// Aborted with no effect.
    Fail,
    /// Unknown: it may have committed.
    Unknown,
}

/// One transaction of a history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Txn {
    /// The client process that ran it.
    pub process: u32,
    /// Its operations, in order.
    pub ops: Vec<MicroOp>,
    /// How it ended.
    pub outcome: Outcome,
}

/// A kind of dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Edge {
    /// Write-write.
    Ww,
    /// Write-read.
    Wr,
    /// Read-write (anti-dependency).
    Rw,
}

/// An anomaly found, with its witness.
#[derive(Debug, Clone)]
pub struct Anomaly {
    /// `G0`, `G1a`, `G1b`, `G1c`, `G-single`, `G2`, or `incompatible-order`.
    pub kind: &'static str,
    /// What shows it: the cycle (`T3 -ww(x)-> T7 -rw(y)-> T3`) or the read.
    pub witness: String,
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Transactions that committed.
    pub committed: usize,
    /// That failed.
    pub failed: usize,
    /// Whose outcome is unknown.
    pub unknown: usize,
    /// Dependency edges inferred.
    pub edges: usize,
    /// Anomalies, at most a few of each kind.
    pub anomalies: Vec<Anomaly>,
}

impl Report {
    /// True when no anomaly was found.
    pub fn valid(&self) -> bool {
        self.anomalies.is_empty()
    }
    /// The anomaly kinds found, each once.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut k: Vec<&'static str> = self.anomalies.iter().map(|a| a.kind).collect();
        k.sort();
        k.dedup();
        k
    }
}

type Graph = HashMap<usize, BTreeMap<usize, (Edge, String)>>;

fn add_edge(g: &mut Graph, from: usize, to: usize, kind: Edge, key: &str) {
    if from == to {
        return;
    }
    let e = g.entry(from).or_default().entry(to).or_insert((kind, key.to_string()));
    // Keep the strongest kind for a pair: ww before wr before rw, so a
    // cycle is classified by the fewest anti-dependencies it needs.
    if kind < e.0 {
        *e = (kind, key.to_string());
    }
}

/// Strongly connected components (iterative Tarjan) of the nodes with edges.
fn sccs(g: &Graph, allowed: &dyn Fn(Edge) -> bool) -> Vec<Vec<usize>> {
    let mut index: HashMap<usize, usize> = HashMap::new();
    let mut low: HashMap<usize, usize> = HashMap::new();
    let mut on: HashSet<usize> = HashSet::new();
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut next = 0;
    let mut nodes: Vec<usize> = g.keys().copied().collect();
    nodes.sort_unstable();
    for &root in &nodes {
        if index.contains_key(&root) {
            continue;
        }
        let mut work: Vec<(usize, Vec<usize>)> = Vec::new();
        let succ = |v: usize| -> Vec<usize> { g.get(&v).map(|m| m.iter().filter(|(_, (k, _))| allowed(*k)).map(|(t, _)| *t).collect()).unwrap_or_default() };
        index.insert(root, next);
        low.insert(root, next);
        next += 1;
        stack.push(root);
        on.insert(root);
        work.push((root, succ(root)));
        while let Some((v, rest)) = work.last_mut() {
            let v = *v;
            if let Some(w) = rest.pop() {
                if let std::collections::hash_map::Entry::Vacant(e) = index.entry(w) {
                    e.insert(next);
                    low.insert(w, next);
                    next += 1;
                    stack.push(w);
                    on.insert(w);
                    let s = succ(w);
                    work.push((w, s));
                } else if on.contains(&w) {
                    let lw = index[&w];
                    let lv = low.get_mut(&v).expect("visited");
                    *lv = (*lv).min(lw);
                }
                continue;
            }
            work.pop();
            if let Some((parent, _)) = work.last() {
                let lv = low[&v];
                let lp = low.get_mut(parent).expect("visited");
                *lp = (*lp).min(lv);
            }
            if low[&v] == index[&v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on.remove(&w);
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    out.push(comp);
                }
            }
        }
    }
    out
}

/// The shortest path `from → … → to` over allowed edges inside `within`.
fn path(g: &Graph, from: usize, to: usize, within: &HashSet<usize>, allowed: &dyn Fn(Edge) -> bool) -> Option<Vec<usize>> {
    let mut prev: HashMap<usize, usize> = HashMap::new();
    let mut q = VecDeque::from([from]);
    let mut seen = HashSet::from([from]);
    while let Some(v) = q.pop_front() {
        if v == to {
            let mut p = vec![to];
            let mut cur = to;
            while cur != from {
                cur = prev[&cur];
                p.push(cur);
            }
            p.reverse();
            return Some(p);
        }
        for (w, (k, _)) in g.get(&v).into_iter().flatten() {
            if allowed(*k) && within.contains(w) && seen.insert(*w) {
                prev.insert(*w, v);
                q.push_back(*w);
            }
        }
    }
    None
}

fn describe(g: &Graph, cycle: &[usize]) -> String {
    let mut s = format!("T{}", cycle[0]);
    for w in cycle.windows(2) {
        let (k, key) = &g[&w[0]][&w[1]];
        let k = match k {
            Edge::Ww => "ww",
            Edge::Wr => "wr",
            Edge::Rw => "rw",
        };
        s.push_str(&format!(" -{k}({key})-> T{}", w[1]));
    }
    s
}

/// Checks a history.
pub fn check(history: &[Txn]) -> Report {
    let mut r = Report::default();
    for t in history {
        match t.outcome {
            Outcome::Ok => r.committed += 1,
            Outcome::Fail => r.failed += 1,
            Outcome::Unknown => r.unknown += 1,
        }
    }
    let mut anomalies = Vec::new();
    let mut writer: HashMap<(&str, u64), usize> = HashMap::new();
    // A transaction's appends per list, in order (for G1b).
    let mut appends_of: HashMap<(usize, &str), Vec<u64>> = HashMap::new();
    for (i, t) in history.iter().enumerate() {
        for op in &t.ops {
            match op {
                MicroOp::Append { key, value } => {
                    writer.insert((key, *value), i);
                    appends_of.entry((i, key)).or_default().push(*value);
                }
                MicroOp::Write { key, value } => {
                    writer.insert((key, *value), i);
                    appends_of.entry((i, key)).or_default().push(*value);
                }
                _ => {}
            }
        }
    }
    let committed = |i: usize| history[i].outcome != Outcome::Fail;
    // Reads of committed transactions, per list.
    let mut reads: HashMap<&str, Vec<(usize, &Vec<u64>)>> = HashMap::new();
    let mut reg_reads: HashMap<&str, Vec<(usize, u64)>> = HashMap::new();
    for (i, t) in history.iter().enumerate().filter(|(_, t)| t.outcome == Outcome::Ok) {
        let mut own: HashSet<(&str, u64)> = HashSet::new();
        for op in &t.ops {
            match op {
                MicroOp::Append { key, value } | MicroOp::Write { key, value } => {
                    own.insert((key, *value));
                }
                MicroOp::Read { key, value: Some(v) } => {
                    // Only what others wrote orders the list (the
                    // transaction's own appends come after its reads of others).
                    let theirs: Vec<u64> = v.iter().copied().filter(|x| !own.contains(&(key.as_str(), *x))).collect();
                    let mut dup = HashSet::new();
                    if let Some(d) = v.iter().find(|x| !dup.insert(**x)) {
                        anomalies.push(Anomaly { kind: "duplicate", witness: format!("T{i} read {key} holding {d} twice: {v:?}") });
                    }
                    for x in &theirs {
                        match writer.get(&(key.as_str(), *x)) {
                            Some(w) if !committed(*w) => {
                                anomalies.push(Anomaly { kind: "G1a", witness: format!("T{i} read {x} in {key}, appended by T{w}, which failed") })
                            }
                            None => anomalies.push(Anomaly { kind: "G1a", witness: format!("T{i} read {x} in {key}, which no transaction appended") }),
                            _ => {}
                        }
                    }
                    if let Some(last) = theirs.last()
                        && let Some(w) = writer.get(&(key.as_str(), *last))
                        && let Some(app) = appends_of.get(&(*w, key.as_str()))
                        && app.last() != Some(last)
                    {
                        anomalies.push(Anomaly {
                            kind: "G1b",
                            witness: format!("T{i} read {key} ending in {last}, an intermediate append of T{w} (which appended {app:?})"),
                        });
                    }
                    reads.entry(key).or_default().push((i, v));
                }
                MicroOp::ReadRegister { key, value: Some(v) } if !own.contains(&(key.as_str(), *v)) => {
                    if *v != 0 {
                        match writer.get(&(key.as_str(), *v)) {
                            Some(w) if !committed(*w) => {
                                anomalies.push(Anomaly { kind: "G1a", witness: format!("T{i} read {v} from {key}, written by T{w}, which failed") })
                            }
                            None => anomalies.push(Anomaly { kind: "G1a", witness: format!("T{i} read {v} from {key}, which no transaction wrote") }),
                            Some(w) if appends_of.get(&(*w, key.as_str())).and_then(|a| a.last()) != Some(v) => {
                                anomalies.push(Anomaly { kind: "G1b", witness: format!("T{i} read {v} from {key}, an intermediate write of T{w}") })
                            }
                            _ => {}
                        }
                    }
                    reg_reads.entry(key).or_default().push((i, *v));
                }
                _ => {}
            }
        }
    }
    let mut g: Graph = HashMap::new();
    // Lists: the longest read is the order; every read a prefix of it.
    for (key, rs) in &reads {
        let longest = rs.iter().map(|(_, v)| *v).max_by_key(|v| v.len()).cloned().unwrap_or_default();
        for (i, v) in rs {
            if longest[..v.len().min(longest.len())] != v[..] {
                anomalies.push(Anomaly { kind: "incompatible-order", witness: format!("T{i} read {key} as {v:?}, not a prefix of {longest:?}") });
            }
        }
        let w = |x: u64| writer.get(&(*key, x)).copied();
        for pair in longest.windows(2) {
            if let (Some(a), Some(b)) = (w(pair[0]), w(pair[1])) {
                add_edge(&mut g, a, b, Edge::Ww, key);
            }
        }
        for (i, v) in rs {
            if let Some(a) = v.last().and_then(|x| w(*x)) {
                add_edge(&mut g, a, *i, Edge::Wr, key);
            }
            if let Some(b) = longest.get(v.len()).and_then(|x| w(*x)) {
                add_edge(&mut g, *i, b, Edge::Rw, key);
            }
        }
    }
    // Registers: wr from each read; where a transaction read v and wrote
    // its own value, v's writer precedes it (ww) and v's other readers
    // precede it too (rw).
    for (i, t) in history.iter().enumerate().filter(|(_, t)| t.outcome == Outcome::Ok) {
        let mut read_first: HashMap<&str, u64> = HashMap::new();
        for op in &t.ops {
            match op {
                MicroOp::ReadRegister { key, value: Some(v) } => {
                    read_first.entry(key).or_insert(*v);
                }
                MicroOp::Write { key, .. } => {
                    if let Some(v) = read_first.get(key.as_str()) {
                        if let Some(a) = writer.get(&(key.as_str(), *v)) {
                            add_edge(&mut g, *a, i, Edge::Ww, key);
                        }
                        for (reader, rv) in reg_reads.get(key.as_str()).into_iter().flatten() {
                            if rv == v {
                                add_edge(&mut g, *reader, i, Edge::Rw, key);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    for (key, rs) in &reg_reads {
        for (i, v) in rs {
            if let Some(a) = writer.get(&(*key, *v)) {
                add_edge(&mut g, *a, *i, Edge::Wr, key);
            }
        }
    }
    r.edges = g.values().map(BTreeMap::len).sum();
    // Cycles, weakest anomaly first; a few witnesses of each.
    const MAX_EACH: usize = 3;
    let ww = |k: Edge| k == Edge::Ww;
    let wwr = |k: Edge| k != Edge::Rw;
    let all = |_: Edge| true;
    for comp in sccs(&g, &ww).into_iter().take(MAX_EACH) {
        let within: HashSet<usize> = comp.iter().copied().collect();
        let a = comp[0];
        if let Some((b, _)) = g[&a].iter().find(|(b, (k, _))| *k == Edge::Ww && within.contains(b))
            && let Some(mut p) = path(&g, *b, a, &within, &ww)
        {
            p.insert(0, a);
            anomalies.push(Anomaly { kind: "G0", witness: describe(&g, &p) });
        }
    }
    let mut found = 0;
    for comp in sccs(&g, &wwr) {
        let within: HashSet<usize> = comp.iter().copied().collect();
        'comp: for &a in &comp {
            for (b, (k, _)) in &g[&a] {
                if *k == Edge::Wr
                    && within.contains(b)
                    && let Some(mut p) = path(&g, *b, a, &within, &wwr)
                {
                    p.insert(0, a);
                    anomalies.push(Anomaly { kind: "G1c", witness: describe(&g, &p) });
                    found += 1;
                    break 'comp;
                }
            }
        }
        if found >= MAX_EACH {
            break;
        }
    }
    let (mut single, mut g2) = (0, 0);
    for comp in sccs(&g, &all) {
        let within: HashSet<usize> = comp.iter().copied().collect();
        for &a in &comp {
            for (b, (k, _)) in &g[&a] {
                if *k != Edge::Rw || !within.contains(b) {
                    continue;
                }
                if single < MAX_EACH
                    && let Some(mut p) = path(&g, *b, a, &within, &wwr)
                {
                    p.insert(0, a);
                    anomalies.push(Anomaly { kind: "G-single", witness: describe(&g, &p) });
                    single += 1;
                } else if g2 < MAX_EACH
                    && let Some(mut p) = path(&g, *b, a, &within, &all)
                {
                    p.insert(0, a);
                    if p.windows(2).filter(|w| g[&w[0]][&w[1]].0 == Edge::Rw).count() > 1 {
                        anomalies.push(Anomaly { kind: "G2", witness: describe(&g, &p) });
                        g2 += 1;
                    }
                }
            }
            if single >= MAX_EACH && g2 >= MAX_EACH {
                break;
            }
        }
    }
    r.anomalies = anomalies;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(k: &str, v: u64) -> MicroOp {
        MicroOp::Append { key: k.into(), value: v }
    }
    fn rd(k: &str, v: &[u64]) -> MicroOp {
        MicroOp::Read { key: k.into(), value: Some(v.to_vec()) }
    }
    fn ok(ops: Vec<MicroOp>) -> Txn {
        Txn { process: 0, ops, outcome: Outcome::Ok }
    }

    #[test]
    fn a_serial_history_is_valid() {
        let h = vec![ok(vec![app("x", 1), app("y", 1)]), ok(vec![rd("x", &[1]), app("x", 2)]), ok(vec![rd("x", &[1, 2]), rd("y", &[1])])];
        let r = check(&h);
        assert!(r.valid(), "{:?}", r.anomalies);
        assert_eq!(r.committed, 3);
    }

    #[test]
    fn write_skew_is_g2_and_a_lost_update_is_g_single() {
        // T0 and T1 each read both lists empty and append to one: write skew.
        let h =
            vec![ok(vec![rd("x", &[]), rd("y", &[]), app("x", 1)]), ok(vec![rd("x", &[]), rd("y", &[]), app("y", 1)]), ok(vec![rd("x", &[1]), rd("y", &[1])])];
        assert_eq!(check(&h).kinds(), vec!["G2"], "{:?}", check(&h).anomalies);
        // T0 and T1 both read x empty and append; T2 sees T0's then T1's: T1 missed T0.
        let h = vec![ok(vec![rd("x", &[]), app("x", 1)]), ok(vec![rd("x", &[]), app("x", 2)]), ok(vec![rd("x", &[1, 2])])];
        let r = check(&h);
        assert!(r.kinds().contains(&"G-single"), "{:?}", r.anomalies);
    }

    #[test]
    fn aborted_and_intermediate_reads_and_cycles_without_anti_dependencies() {
        let h = vec![Txn { process: 0, ops: vec![app("x", 1)], outcome: Outcome::Fail }, ok(vec![rd("x", &[1])])];
        assert_eq!(check(&h).kinds(), vec!["G1a"]);
        let h = vec![ok(vec![app("x", 1), app("x", 2)]), ok(vec![rd("x", &[1])])];
        assert!(check(&h).kinds().contains(&"G1b"));
        // T0 → T1 on x (ww), T1 → T0 on y (ww): G0.
        let h = vec![ok(vec![app("x", 1), app("y", 2)]), ok(vec![app("x", 2), app("y", 1)]), ok(vec![rd("x", &[1, 2]), rd("y", &[1, 2])])];
        assert!(check(&h).kinds().contains(&"G0"), "{:?}", check(&h).anomalies);
        // T0 reads T1's y, T1 reads T0's x: G1c.
        let h = vec![ok(vec![app("x", 1), rd("y", &[1])]), ok(vec![app("y", 1), rd("x", &[1])])];
        assert!(check(&h).kinds().contains(&"G1c"), "{:?}", check(&h).anomalies);
        let h = vec![ok(vec![app("x", 1)]), ok(vec![app("x", 2)]), ok(vec![rd("x", &[1, 2])]), ok(vec![rd("x", &[2])])];
        assert!(check(&h).kinds().contains(&"incompatible-order"));
    }

    #[test]
    fn registers_order_where_a_read_precedes_a_write() {
        let w = |k: &str, v| MicroOp::Write { key: k.into(), value: v };
        let r = |k: &str, v| MicroOp::ReadRegister { key: k.into(), value: Some(v) };
        // Both read 0 and write: the second overwrote what the first read.
        let h = vec![ok(vec![r("a", 0), r("b", 0), w("a", 1)]), ok(vec![r("a", 0), r("b", 0), w("b", 2)])];
        let rep = check(&h);
        assert!(rep.kinds().contains(&"G2"), "{:?}", rep.anomalies);
        let h = vec![ok(vec![r("a", 0), w("a", 1)]), ok(vec![r("a", 1), w("a", 2)]), ok(vec![r("a", 2)])];
        assert!(check(&h).valid(), "{:?}", check(&h).anomalies);
    }
}
