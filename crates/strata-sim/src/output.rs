//! Writing an experiment's CSV and SVG bar chart.

use crate::SimError;
use plotters::prelude::*;
use std::path::Path;

/// One experiment's results: a table and the bar chart of one column.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Output {
    /// Experiment name (file stem).
    pub name: String,
    /// Column names.
    pub columns: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
    /// Chart title.
    pub title: String,
    /// (label, value) bars.
    pub bars: Vec<(String, f64)>,
    /// Y axis label.
    pub y_label: String,
}

/// Writes `<out>/<name>.csv` and `<out>/<name>.svg`.
pub fn write_outputs(out: &Path, o: &Output) -> Result<(), SimError> {
    std::fs::create_dir_all(out).map_err(|source| SimError::Io { path: out.display().to_string(), source })?;
    let csv_path = out.join(format!("{}.csv", o.name));
    let mut csv = o.columns.join(",") + "\n";
    for r in &o.rows {
        csv += &(r.join(",") + "\n");
    }
    std::fs::write(&csv_path, csv).map_err(|source| SimError::Io { path: csv_path.display().to_string(), source })?;
    let svg_path = out.join(format!("{}.svg", o.name));
    let err = |e: String| SimError::Plot { path: svg_path.display().to_string(), detail: e };
    let root = SVGBackend::new(&svg_path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let max = o.bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let labels: Vec<String> = o.bars.iter().map(|b| b.0.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(&o.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..o.bars.len()).into_segmented(), 0.0..max)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(&o.y_label)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(|e| err(e.to_string()))?;
    chart
        .draw_series(o.bars.iter().enumerate().map(|(i, (_, v))| {
            let mut bar = Rectangle::new([(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *v)], BLUE.mix(0.6).filled());
            bar.set_margin(0, 0, 8, 8);
            bar
        }))
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}
