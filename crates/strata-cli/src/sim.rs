//! `strata sim`: the placement experiments of the papers.

use anyhow::{Result, bail};
use std::path::PathBuf;
use std::time::Instant;
use strata_sim::{ambry_rebalance, fds_locator, kinesis_balance, overprovision};

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Experiment: kinesis-overprovision, kinesis-imbalance, kinesis-recovery, fds-locator or ambry-rebalance.
    pub experiment: String,
    /// Folder for the CSV and SVG outputs.
    #[arg(long, default_value = "./sim-out")]
    pub out: PathBuf,
    /// Objects inserted (kinesis-overprovision).
    #[arg(long)]
    pub objects: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: SimArgs) -> Result<()> {
    let t = Instant::now();
    match a.experiment.as_str() {
        "kinesis-overprovision" => {
            let mut p = overprovision::Params::default();
            if let Some(n) = a.objects {
                p.objects = n;
            }
            let rows = overprovision::experiment(&p);
            let out = strata_sim::Output {
                name: "kinesis-overprovision".into(),
                columns: vec!["scheme".into(), "rho_max".into(), "beta_percent".into(), "final_servers".into()],
                rows: rows
                    .iter()
                    .map(|r| vec![r.scheme.clone(), format!("{:.4}", r.rho_max), format!("{:.2}", r.beta_percent), r.final_servers.to_string()])
                    .collect(),
                title: format!("Overprovisioning: Kinesis(k,3) vs Chain(3), {} objects", p.objects),
                bars: rows.iter().map(|r| (r.scheme.clone(), r.beta_percent)).collect(),
                y_label: "overprovisioning β (%)".into(),
            };
            strata_sim::write_outputs(&a.out, &out)?;
            if a.json {
                println!("{}", serde_json::json!({ "experiment": out.name, "params": p, "rows": rows, "seconds": t.elapsed().as_secs_f64() }));
            } else {
                println!(
                    "kinesis-overprovision: {} objects of 10 MB, {} servers of 64 GB growing by {}",
                    p.objects, p.initial_servers, p.servers_per_expansion
                );
                println!("| scheme | rho_max | beta % | servers at end |");
                println!("|--------|---------|--------|----------------|");
                for r in &rows {
                    println!("| {:<6} | {:>7.4} | {:>6.2} | {:>14} |", r.scheme, r.rho_max, r.beta_percent, r.final_servers);
                }
                println!("wrote {}/{{kinesis-overprovision.csv,.svg}} in {:.1} s", a.out.display(), t.elapsed().as_secs_f64());
            }
        }
        "fds-locator" => {
            let p = fds_locator::Params::default();
            let spreads = fds_locator::locators(&p);
            let layouts = fds_locator::layouts(&p);
            let mut rows: Vec<Vec<String>> = spreads
                .iter()
                .map(|s| {
                    vec![
                        "locator".into(),
                        s.locator.clone(),
                        s.min.to_string(),
                        s.max.to_string(),
                        format!("{:.2}", s.mean),
                        format!("{:.2}", s.stddev),
                        String::new(),
                        String::new(),
                    ]
                })
                .collect();
            for l in &layouts {
                for (f, prob) in &l.loss {
                    rows.push(vec![
                        "layout".into(),
                        l.layout.clone(),
                        String::new(),
                        String::new(),
                        String::new(),
                        format!("{:.1}", l.scatter_width),
                        f.to_string(),
                        format!("{prob:.4}"),
                    ]);
                }
            }
            let out = strata_sim::Output {
                name: "fds-locator".into(),
                columns: ["part", "name", "min_tracts", "max_tracts", "mean_tracts", "stddev_tracts_or_scatter_width", "failures", "loss_probability"]
                    .map(String::from)
                    .to_vec(),
                rows,
                title: format!("Tracts per server: {} tracts of one blob on {} servers (min/max)", p.tracts, p.servers),
                bars: spreads
                    .iter()
                    .flat_map(|s| [(format!("{} min", short(&s.locator)), s.min as f64), (format!("{} max", short(&s.locator)), s.max as f64)])
                    .collect(),
                y_label: "tracts on a server".into(),
            };
            strata_sim::write_outputs(&a.out, &out)?;
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({ "experiment": out.name, "params": p, "locators": spreads, "layouts": layouts, "seconds": t.elapsed().as_secs_f64() })
                );
            } else {
                println!("fds-locator: {} tracts (1 TB of 8 MB) of one blob on {} servers, TLT of {} permutations", p.tracts, p.servers, p.permutations);
                println!("| locator | min | max | mean | stddev |");
                println!("|---------|-----|-----|------|--------|");
                for s in &spreads {
                    println!("| {} | {} | {} | {:.1} | {:.2} |", s.locator, s.min, s.max, s.mean, s.stddev);
                }
                println!();
                println!(
                    "replicated layouts (3 replicas, {} disks, racks of {}): recovery parallelism vs chance of data loss",
                    p.layout_disks, p.disks_per_rack
                );
                let header: Vec<String> = p.failures.iter().map(|f| format!("P(loss) {f} down")).collect();
                println!("| layout | rows | scatter width | {} |", header.join(" | "));
                println!("|--------|------|---------------|{}", "------|".repeat(p.failures.len()));
                for l in &layouts {
                    let cells: Vec<String> = l.loss.iter().map(|(_, prob)| format!("{prob:.4}")).collect();
                    println!("| {} | {} | {:.1} | {} |", l.layout, l.rows, l.scatter_width, cells.join(" | "));
                }
                println!("wrote {}/{{fds-locator.csv,.svg}} in {:.1} s", a.out.display(), t.elapsed().as_secs_f64());
            }
        }
        "ambry-rebalance" => {
            use strata_placement::ambry::Phase1Rule;
            let p = ambry_rebalance::Params::default();
            let without = ambry_rebalance::run(&p, None);
            // The default rule first: its gains are the figure's bars.
            let rules = [
                (Phase1Rule::WholePartitions, "phase 1 to the ideal state in whole partitions (the default)"),
                (Phase1Rule::NeverBelowIdeal, "phase 1 never below the fractional ideal (the paper's text)"),
                (Phase1Rule::Literal, "phase 1 literal (the paper's pseudo-code)"),
                (Phase1Rule::CountsOnly, "phase 1 never below the fractional ideal, read-only by count alone"),
            ];
            let runs: Vec<(Phase1Rule, &str, ambry_rebalance::Run, Vec<ambry_rebalance::Table4Row>)> = rules
                .iter()
                .map(|&(rule, name)| {
                    let run = ambry_rebalance::run(&p, Some(rule));
                    let table = ambry_rebalance::table4(&p, &without, &run);
                    (rule, name, run, table)
                })
                .collect();
            let mut rows = Vec::new();
            for r in std::iter::once(&without).chain(runs.iter().map(|x| &x.2)) {
                for w in &r.weeks {
                    let mut row = vec![r.rebalancing.clone().unwrap_or_else(|| "none".into()), w.week.to_string(), w.nodes.to_string()];
                    for s in [w.read, w.write, w.usage] {
                        row.extend([s.avg, s.min, s.max, s.std].map(|x| format!("{x:.3}")));
                    }
                    rows.push(row);
                }
            }
            let mut columns = vec!["rebalancing".to_string(), "week".into(), "datanodes".into()];
            for m in ["read", "write", "usage"] {
                columns.extend(["avg", "min", "max", "std"].map(|s| format!("{m}_{s}")));
            }
            let default_table = &runs[0].3;
            let out = strata_sim::Output {
                name: "ambry-rebalance".into(),
                columns,
                rows,
                title: format!("Ambry rebalancing over {} weeks: improvement of range and stddev", p.weeks),
                bars: default_table
                    .iter()
                    .flat_map(|r| [(format!("{} range", r.metric), r.range_gain()), (format!("{} std", r.metric), r.std_gain())])
                    .collect(),
                y_label: "improvement (x)".into(),
            };
            strata_sim::write_outputs(&a.out, &out)?;
            let moved = |r: &ambry_rebalance::Run| r.movements.iter().map(|m| m.moved_gb).sum::<u64>();
            let minimum = |r: &ambry_rebalance::Run| r.movements.iter().map(|m| m.minimum_gb).sum::<f64>();
            if a.json {
                let variants: Vec<serde_json::Value> = runs
                    .iter()
                    .map(|(rule, name, run, table)| serde_json::json!({"rule": format!("{rule:?}"), "name": name, "table4": table, "movements": run.movements}))
                    .collect();
                let v = serde_json::json!({"experiment": out.name, "params": p, "rules": variants, "seconds": t.elapsed().as_secs_f64()});
                println!("{v}");
            } else {
                let nodes = without.weeks.last().map_or(0, |w| w.nodes);
                println!("ambry-rebalance: {} weeks, {} datanodes at the end, {} rebalancing points", p.weeks, nodes, runs[0].2.movements.len());
                for (_, name, run, table) in &runs {
                    println!();
                    println!("{name}:");
                    println!(
                        "| integral over weeks {}..{} | range w/o RB | range w/ RB | gain | stddev w/o RB | stddev w/ RB | gain |",
                        p.bootstrap_weeks, p.weeks
                    );
                    println!("|---|---|---|---|---|---|---|");
                    for r in table.iter() {
                        println!(
                            "| {} | {:.0} | {:.0} | {:.1}x | {:.0} | {:.0} | {:.1}x |",
                            r.metric,
                            r.range_without,
                            r.range_with,
                            r.range_gain(),
                            r.std_without,
                            r.std_with,
                            r.std_gain()
                        );
                    }
                    let over = run.movements.iter().filter(|m| m.moved_gb as f64 > m.minimum_gb).count();
                    println!(
                        "data moved: {} GB in total, minimum to reach the ideal usage {:.0} GB; {over} of {} points moved more than their minimum",
                        moved(run),
                        minimum(run),
                        run.movements.len()
                    );
                }
                println!("wrote {}/{{ambry-rebalance.csv,.svg}} in {:.1} s", a.out.display(), t.elapsed().as_secs_f64());
            }
        }
        "kinesis-imbalance" => {
            let runs = kinesis_balance::imbalance(32, 3);
            let last = |r: &kinesis_balance::Imbalance| r.points.last().copied().unwrap_or((0, 0.0, 0.0));
            let peak = |r: &kinesis_balance::Imbalance| r.points.iter().skip(5).map(|p| p.2).fold(0.0, f64::max);
            let rows = runs
                .iter()
                .flat_map(|r| {
                    r.points.iter().map(move |p| vec![r.trace.clone(), r.scheme.clone(), p.0.to_string(), format!("{:.0}", p.1), format!("{:.2}", p.2)])
                })
                .collect();
            let out = strata_sim::Output {
                name: "kinesis-imbalance".into(),
                columns: ["trace", "scheme", "objects", "max_minus_mean_bytes", "max_minus_mean_percent"].map(String::from).to_vec(),
                rows,
                title: "Storage imbalance on 32 servers at the end (max - mean, % of mean)".into(),
                bars: runs.iter().map(|r| (format!("{} {}", r.trace, if r.scheme.starts_with('K') { "K(7,3)" } else { "Chain" }), last(r).2)).collect(),
                y_label: "max - mean (% of mean)".into(),
            };
            strata_sim::write_outputs(&a.out, &out)?;
            if a.json {
                println!("{}", serde_json::json!({ "experiment": out.name, "runs": runs, "seconds": t.elapsed().as_secs_f64() }));
            } else {
                println!("kinesis-imbalance: objects of three size distributions into 32 servers; storage imbalance = max - mean");
                println!("| trace | scheme | objects | imbalance at end | % of mean at end | worst % after the first 10% |");
                println!("|---|---|---|---|---|---|");
                for r in &runs {
                    let l = last(r);
                    println!("| {} | {} | {} | {:.2} GB | {:.2}% | {:.2}% |", r.trace, r.scheme, l.0, l.1 / 1e9, l.2, peak(r));
                }
                println!("wrote {}/{{kinesis-imbalance.csv,.svg}} in {:.1} s", a.out.display(), t.elapsed().as_secs_f64());
            }
        }
        "kinesis-recovery" => {
            let rows = kinesis_balance::recovery(&[16, 32, 64, 128, 256], 300);
            let out = strata_sim::Output {
                name: "kinesis-recovery".into(),
                columns: ["scheme", "servers", "sources", "destinations", "servers_involved", "max_server_bytes", "bytes", "parallelism"]
                    .map(String::from)
                    .to_vec(),
                rows: rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.scheme.clone(),
                            r.servers.to_string(),
                            r.sources.to_string(),
                            r.destinations.to_string(),
                            r.servers_involved.to_string(),
                            r.max_server_bytes.to_string(),
                            r.bytes.to_string(),
                            format!("{:.2}", r.parallelism),
                        ]
                    })
                    .collect(),
                title: "Degree of parallelism of recovering one failed server".into(),
                bars: rows
                    .iter()
                    .map(|r| (format!("{} n={}", r.scheme.replace("Kinesis(7,3) ", "K").replace("Chain(3)", "Chain"), r.servers), r.parallelism))
                    .collect(),
                y_label: "degree of parallelism".into(),
            };
            strata_sim::write_outputs(&a.out, &out)?;
            if a.json {
                println!("{}", serde_json::json!({ "experiment": out.name, "rows": rows, "seconds": t.elapsed().as_secs_f64() }));
            } else {
                println!("kinesis-recovery: block trace, 300 objects of 10 MB per server, server 0 fails");
                println!("| scheme | servers | servers involved | sources | destinations | most bytes on one server | degree of parallelism |");
                println!("|---|---|---|---|---|---|---|");
                for r in &rows {
                    println!(
                        "| {} | {} | {} | {} | {} | {:.2} GB | {:.1} |",
                        r.scheme,
                        r.servers,
                        r.servers_involved,
                        r.sources,
                        r.destinations,
                        r.max_server_bytes as f64 / 1e9,
                        r.parallelism
                    );
                }
                println!("wrote {}/{{kinesis-recovery.csv,.svg}} in {:.1} s", a.out.display(), t.elapsed().as_secs_f64());
            }
        }
        other => bail!("unknown experiment {other:?}; available: kinesis-overprovision, kinesis-imbalance, kinesis-recovery, fds-locator, ambry-rebalance"),
    }
    Ok(())
}

fn short(locator: &str) -> &str {
    if locator.starts_with("(Hash(g)+i)") { "uniform" } else { "Hash(g+i)" }
}
