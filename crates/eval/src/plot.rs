//! Evaluation charts as SVG files: retrieval metrics per configuration, and the share of questions
//! refused against the relevance floor.
//!
//! Imports `error` and the metric names of [`super::metrics`]. Drawn with plotters' SVG backend
//! only: no bitmap backend and no font files (SVG text is laid out by the viewer, so plotters'
//! built-in size estimate is enough), which keeps the build free of system libraries.

use std::ops::Range;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::metrics::QueryMetrics;
use ragbox_core::error::{Error, Result};

/// What drawing on an SVG area returns.
type Drawn = std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// An SVG drawing area.
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Bar colours of the four metrics, in [`QueryMetrics::NAMES`] order.
const METRIC_COLORS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40)];

/// Colours of the refusal chart: in-domain, out-of-domain, the chosen floor.
const IN_DOMAIN: RGBColor = RGBColor(31, 119, 180);
const OUT_OF_DOMAIN: RGBColor = RGBColor(214, 39, 40);
const CHOSEN: RGBColor = RGBColor(90, 90, 90);

/// Height of the legend strip under the title, in pixels.
const LEGEND_HEIGHT: u32 = 36;

/// A line of the refusal chart: its name, colour and `(floor, share)` points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// How a legend entry is marked.
#[derive(Clone, Copy)]
enum Mark {
    Bar,
    Line,
    Dashed,
}

/// Writes a grouped bar chart of retrieval metrics to `path` (SVG): one group per configuration
/// `(name, [nDCG@10, recall@10, recall@100, MRR@10])` (see [`QueryMetrics::to_array`]), y from 0
/// to 1, with a legend.
pub fn metrics_chart(path: &Path, title: &str, rows: &[(String, [f64; 4])]) -> Result<()> {
    let width = (160 + 120 * rows.len() as u32).max(640);
    let root = SVGBackend::new(path, (width, 480)).into_drawing_area();
    draw_metrics(&root, title, rows).and_then(|()| root.present()).map_err(drawing_error(path))
}

/// Draws the metrics chart on `root`.
fn draw_metrics(root: &Area, title: &str, rows: &[(String, [f64; 4])]) -> Drawn {
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (legend, plot) = root.split_vertically(LEGEND_HEIGHT);
    let entries: Vec<(String, RGBColor, Mark)> =
        QueryMetrics::NAMES.iter().zip(METRIC_COLORS).map(|(n, c)| (n.to_string(), c, Mark::Bar)).collect();
    draw_legend(&legend, &entries)?;
    // Group i spans x in [10i, 10i + 10): its label sits at the centre, its four bars 2 wide
    // from 10i + 1. (Integer x: plotters formats custom key points only on integer axes.)
    let groups = rows.len().max(1) as i32;
    let x = (0..10 * groups).with_key_points((0..rows.len() as i32).map(|i| 10 * i + 5).collect());
    let mut chart = ChartBuilder::on(&plot)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(x, 0.0..1.0)?;
    let name_at = |x: &i32| rows.get((x / 10) as usize).map(|(name, _)| name.clone()).unwrap_or_default();
    chart.configure_mesh().disable_x_mesh().x_label_formatter(&name_at).y_desc("score").draw()?;
    for (j, color) in METRIC_COLORS.iter().enumerate() {
        let bars = rows.iter().enumerate().filter(|(_, (_, v))| v[j].is_finite()).map(|(i, (_, v))| {
            let left = 10 * i as i32 + 1 + 2 * j as i32;
            let mut bar = Rectangle::new([(left, v[j].clamp(0.0, 1.0)), (left + 2, 0.0)], color.filled());
            bar.set_margin(0, 0, 1, 1);
            bar
        });
        chart.draw_series(bars)?;
    }
    Ok(())
}

/// Writes a line chart to `path` (SVG) of the share of in-domain and out-of-domain questions
/// refused (0 to 1) at each relevance floor, with a dashed vertical marker at the `chosen` floor.
/// The three slices pair up by index; points with a non-finite value are left out.
pub fn refusal_chart(
    path: &Path,
    title: &str,
    floors: &[f64],
    in_domain_refused: &[f64],
    out_of_domain_refused: &[f64],
    chosen: Option<f64>,
) -> Result<()> {
    if in_domain_refused.len() != floors.len() || out_of_domain_refused.len() != floors.len() {
        return Err(Error::Invalid(format!(
            "refusal chart {}: {} floors but {} in-domain and {} out-of-domain shares",
            path.display(),
            floors.len(),
            in_domain_refused.len(),
            out_of_domain_refused.len()
        )));
    }
    let series: [Series; 2] = [
        ("in-domain refused", IN_DOMAIN, points(floors, in_domain_refused)),
        ("out-of-domain refused", OUT_OF_DOMAIN, points(floors, out_of_domain_refused)),
    ];
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    draw_refusals(&root, title, floor_range(floors, chosen), &series, chosen.filter(|c| c.is_finite()))
        .and_then(|()| root.present())
        .map_err(drawing_error(path))
}

/// The finite `(floor, share)` pairs, by floor.
fn points(floors: &[f64], shares: &[f64]) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> =
        floors.iter().copied().zip(shares.iter().copied()).filter(|(f, s)| f.is_finite() && s.is_finite()).collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// The x range covering the floors and the chosen one, widened when it is a single value.
fn floor_range(floors: &[f64], chosen: Option<f64>) -> Range<f64> {
    let (lo, hi) = floors
        .iter()
        .copied()
        .chain(chosen)
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        0.0..1.0
    } else if lo == hi {
        lo - 0.5..hi + 0.5
    } else {
        lo..hi
    }
}

/// Draws the refusal chart on `root`.
fn draw_refusals(
    root: &Area,
    title: &str,
    x: Range<f64>,
    series: &[Series],
    chosen: Option<f64>,
) -> Drawn {
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (legend, plot) = root.split_vertically(LEGEND_HEIGHT);
    let mut entries: Vec<(String, RGBColor, Mark)> =
        series.iter().map(|(name, color, _)| (name.to_string(), *color, Mark::Line)).collect();
    if let Some(c) = chosen {
        entries.push((format!("chosen floor {c:.3}"), CHOSEN, Mark::Dashed));
    }
    draw_legend(&legend, &entries)?;
    let mut chart = ChartBuilder::on(&plot)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(x, 0.0..1.0)?;
    chart.configure_mesh().x_desc("relevance floor").y_desc("share refused").draw()?;
    for (_, color, points) in series {
        chart.draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    if let Some(c) = chosen {
        chart.draw_series(DashedLineSeries::new([(c, 0.0), (c, 1.0)], 6, 4, CHOSEN.stroke_width(2)))?;
    }
    Ok(())
}

/// Draws legend entries left to right across `area`.
fn draw_legend(area: &Area, entries: &[(String, RGBColor, Mark)]) -> Drawn {
    let (y_top, y_mid) = (12, 19);
    let mut x = 60;
    for (name, color, mark) in entries {
        match mark {
            Mark::Bar => area.draw(&Rectangle::new([(x, y_top), (x + 14, y_top + 14)], color.filled()))?,
            Mark::Line => area.draw(&PathElement::new(vec![(x, y_mid), (x + 20, y_mid)], color.stroke_width(2)))?,
            Mark::Dashed => {
                area.draw(&PathElement::new(vec![(x, y_mid), (x + 8, y_mid)], color.stroke_width(2)))?;
                area.draw(&PathElement::new(vec![(x + 12, y_mid), (x + 20, y_mid)], color.stroke_width(2)))?;
            }
        }
        area.draw(&Text::new(name.clone(), (x + 26, y_top), ("sans-serif", 15)))?;
        // Roughly 8 px per character at 15 px, then a gap.
        x += 26 + 8 * name.chars().count() as i32 + 28;
    }
    Ok(())
}

/// Maps a drawing failure to an error naming the chart file.
fn drawing_error<E>(path: &Path) -> impl FnOnce(E) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    let wrap = Error::path(path.to_path_buf());
    move |e| wrap(std::io::Error::other(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_svg(path: &Path) -> String {
        let svg = std::fs::read_to_string(path).expect("chart written");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        svg
    }

    #[test]
    fn metrics_chart_names_every_configuration() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("metrics.svg");
        let rows = vec![
            ("bm25".to_string(), [0.6, 0.7, 0.9, 0.55]),
            ("dense-structural".to_string(), [0.7, 0.8, 0.95, 0.65]),
            ("hybrid-rerank".to_string(), [0.75, 0.82, f64::NAN, 1.2]),
        ];
        metrics_chart(&path, "scifact test", &rows).expect("chart");
        let svg = read_svg(&path);
        for name in ["bm25", "dense-structural", "hybrid-rerank", "scifact test", "nDCG@10", "MRR@10"] {
            assert!(svg.contains(name), "{name} missing");
        }
    }

    #[test]
    fn refusal_chart_draws_both_series_and_the_floor() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("refusal.svg");
        let floors = [0.0, 0.1, 0.2, 0.3];
        refusal_chart(&path, "refusals", &floors, &[0.0, 0.05, 0.1, 0.4], &[0.2, 0.5, 0.8, 1.0], Some(0.2))
            .expect("chart");
        let svg = read_svg(&path);
        for name in ["in-domain refused", "out-of-domain refused", "chosen floor 0.200", "relevance floor"] {
            assert!(svg.contains(name), "{name} missing");
        }
        // A single floor and no choice still draws.
        refusal_chart(&path, "one", &[0.5], &[0.1], &[0.9], None).expect("one floor");
        read_svg(&path);
    }

    #[test]
    fn refusal_chart_rejects_mismatched_series() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let err = refusal_chart(&tmp.path().join("x.svg"), "t", &[0.1, 0.2], &[0.0], &[0.0, 1.0], None)
            .expect_err("mismatch");
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }

    #[test]
    fn unwritable_path_is_named() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("no-such-dir").join("m.svg");
        let err = metrics_chart(&path, "t", &[]).expect_err("no folder");
        assert!(err.to_string().contains("no-such-dir"), "{err}");
    }
}
