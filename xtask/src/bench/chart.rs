//! SVG charts of the tables: grouped bars, or lines when the rows are numbers.

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;

use super::line::ROW_KEY;
use super::table::Table;

/// Size of the SVG charts, in pixels.
pub const SVG_SIZE: (u32, u32) = (1000, 560);
/// Width of one row's slot on the integer axis of a bar chart.
const BAR_SLOT: i32 = 1000;
/// Share of a row's slot the bars of a grouped bar chart fill.
const BAR_GROUP_WIDTH: f64 = 0.8;
/// Least headroom above the highest value of a chart, as a share of the value range.
const CHART_HEADROOM: f64 = 0.12;
/// Height in pixels of the plotting area, roughly (the SVG less caption, axis labels, margins).
const PLOT_HEIGHT_PX: f64 = 440.0;
/// Height in pixels of one legend entry, and of the legend's frame.
const LEGEND_ENTRY_PX: f64 = 15.0;
/// Height in pixels of the legend's frame and its distance from the top.
const LEGEND_FRAME_PX: f64 = 30.0;

/// The columns a chart draws: those with at least one number, limited to the table's preferred
/// ones (each also with a `_suffix`) when any of those exists.
fn chart_columns(table: &Table) -> Vec<&str> {
    let numeric: Vec<&str> = table
        .columns
        .iter()
        .filter(|c| table.rows.iter().any(|r| r.number(c).is_some()))
        .map(String::as_str)
        .collect();
    let preferred = |column: &str| {
        table.chart.iter().any(|c| {
            column
                .strip_prefix(c.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
        })
    };
    let chosen: Vec<&str> = numeric.iter().copied().filter(|c| preferred(c)).collect();
    if chosen.is_empty() {
        numeric
    } else {
        chosen
    }
}

/// The rows' names as numbers, if every row is named by a number and there are at least two
/// (e.g. call depths): such a table is drawn as a line chart.
fn numeric_rows(table: &Table) -> Option<Vec<f64>> {
    if table.rows.len() < 2 {
        return None;
    }
    table
        .rows
        .iter()
        .map(|r| r.name.parse::<f64>().ok().filter(|x| x.is_finite()))
        .collect()
}

/// The vertical range of a chart of `values`: from 0 (or below, for negative values) to above
/// the highest, leaving room at the top for a legend of `legend_entries` lines.
fn value_range(values: impl Iterator<Item = f64>, legend_entries: usize) -> (f64, f64) {
    let (mut low, mut high) = (0.0f64, 0.0f64);
    for v in values {
        low = low.min(v);
        high = high.max(v);
    }
    if high - low <= f64::EPSILON {
        high = low + 1.0;
    }
    // The legend takes this share of the plot's height at the top; the bars stay below it.
    let legend =
        ((legend_entries as f64 * LEGEND_ENTRY_PX + LEGEND_FRAME_PX) / PLOT_HEIGHT_PX).min(0.6);
    let headroom = (legend / (1.0 - legend)).max(CHART_HEADROOM);
    let pad = (high - low) * headroom;
    let low = if low < 0.0 {
        low - (high - low) * CHART_HEADROOM
    } else {
        low
    };
    (low, high + pad)
}

/// Turns a plotting error into ours.
fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the chart: {error}")
}

/// Short form of an axis number: no trailing zeros.
pub fn axis_number(x: f64) -> String {
    let text = format!("{x:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// The table as an SVG chart: a line chart when the rows are numbers, else bars grouped by row,
/// one bar per numeric column. `None` when the table has no number to draw.
pub fn to_svg(table: &Table, mode: &str) -> Result<Option<String>> {
    let columns = chart_columns(table);
    if columns.is_empty() {
        return Ok(None);
    }
    let (low, high) = value_range(
        table
            .rows
            .iter()
            .flat_map(|r| columns.iter().filter_map(|c| r.number(c))),
        columns.len(),
    );
    let title = format!("{} ({}, {mode})", table.name, table.arch);
    let x_label = if table.x_label.is_empty() {
        ROW_KEY
    } else {
        &table.x_label
    };
    let y_label = match (table.y_label.as_str(), columns.as_slice()) {
        ("", [only]) => only,
        ("", _) => "value",
        (label, _) => label,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SVG_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(56)
            .y_label_area_size(90);
        if let Some(xs) = numeric_rows(table) {
            let (mut x_low, mut x_high) = xs
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                    (lo.min(x), hi.max(x))
                });
            if x_high - x_low <= f64::EPSILON {
                x_low -= 1.0;
                x_high += 1.0;
            }
            let mut chart = builder
                .build_cartesian_2d(x_low..x_high, low..high)
                .map_err(plot_error)?;
            chart
                .configure_mesh()
                .x_labels(xs.len().min(20))
                .x_desc(x_label)
                .y_desc(y_label)
                .x_label_formatter(&|x| axis_number(*x))
                .y_label_formatter(&|y| axis_number(*y))
                .draw()
                .map_err(plot_error)?;
            for (j, column) in columns.iter().enumerate() {
                let color = Palette99::pick(j).to_rgba();
                let mut points: Vec<(f64, f64)> = xs
                    .iter()
                    .zip(&table.rows)
                    .filter_map(|(&x, row)| Some((x, row.number(column)?)))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(plot_error)?;
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))
                    .map_err(plot_error)?
                    .label(*column)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(plot_error)?;
        } else {
            // Row i occupies [i * SLOT, (i + 1) * SLOT) of an integer axis (an integer axis
            // can carry labels at chosen points: the slot centres, named by the rows).
            let n = i32::try_from(table.rows.len()).context("too many rows for a chart")?;
            let names: Vec<&str> = table.rows.iter().map(|r| r.name.as_str()).collect();
            let centres: Vec<i32> = (0..n).map(|i| i * BAR_SLOT + BAR_SLOT / 2).collect();
            let mut chart = builder
                .build_cartesian_2d((0..n * BAR_SLOT).with_key_points(centres), low..high)
                .map_err(plot_error)?;
            let row_name = |x: &i32| {
                usize::try_from(x.div_euclid(BAR_SLOT))
                    .ok()
                    .and_then(|slot| names.get(slot))
                    .map_or(String::new(), |s| s.to_string())
            };
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .x_label_formatter(&row_name)
                .y_label_formatter(&|y| axis_number(*y))
                .draw()
                .map_err(plot_error)?;
            let k = i32::try_from(columns.len()).context("too many columns for a chart")?;
            let group = (f64::from(BAR_SLOT) * BAR_GROUP_WIDTH) as i32;
            let width = (group / k).max(1);
            let start = (BAR_SLOT - width * k) / 2;
            for (j, column) in (0..k).zip(&columns) {
                let color = Palette99::pick(j as usize).to_rgba();
                chart
                    .draw_series((0..n).zip(&table.rows).filter_map(|(i, row)| {
                        let v = row.number(column)?;
                        let x0 = i * BAR_SLOT + start + j * width;
                        Some(Rectangle::new([(x0, 0.0), (x0 + width, v)], color.filled()))
                    }))
                    .map_err(plot_error)?
                    .label(*column)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::table::Tables;
    use crate::bench::test_support::{cubix_tables, line};

    #[test]
    fn draws_bar_and_line_charts() {
        let tables = cubix_tables();
        let svg = to_svg(&tables.tables[0], "tcg").unwrap().unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("cubix (x86_64, tcg)"));
        assert!(svg.contains("2nd_noaff") && svg.contains("cycles_tagoff"));
        assert!(svg.contains("<rect"));

        let mut sweep = Tables::default();
        for depth in 1..=10 {
            let text = format!(
                "BENCH table=fcs_sweep row={depth} window=40 full={}",
                100 + depth * 8
            );
            sweep.add("x86_64", &line(&text), "");
        }
        assert!(numeric_rows(&sweep.tables[0]).is_some());
        let svg = to_svg(&sweep.tables[0], "tcg").unwrap().unwrap();
        assert!(svg.contains("<polyline") && svg.contains("window"));

        let mut words = Tables::default();
        words.add("x86_64", &line("BENCH table=t row=r a=unsupported"), "");
        assert_eq!(to_svg(&words.tables[0], "tcg").unwrap(), None);
    }
}
