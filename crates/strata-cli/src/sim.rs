//! `strata sim`: the placement experiments of the papers.

use anyhow::{Result, bail};
use std::path::PathBuf;
use std::time::Instant;
use strata_sim::overprovision;

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Experiment: kinesis-overprovision.
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
        other => bail!("unknown experiment {other:?}; available: kinesis-overprovision"),
    }
    Ok(())
}
