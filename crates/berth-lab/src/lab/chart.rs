//! `lab.svg`: for each load shape, requests/s and p99 latency per server as horizontal bars,
//! berth's models in blue and peers in orange. A server whose row was client-bound is marked
//! with `*` (its requests/s measured the load generator).

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use super::shapes::SHAPES;
use super::LabReport;

const WIDTH: u32 = 1200;
const TITLE_HEIGHT: u32 = 50;
const BAR_HEIGHT: u32 = 22;
const PANEL_CHROME: u32 = 70;

const BERTH: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
const PEER: RGBColor = RGBColor(0xdd, 0x84, 0x52);

/// Renders the chart as an SVG document.
pub fn render(r: &LabReport) -> Result<String, String> {
    let shapes: Vec<_> = SHAPES
        .iter()
        .filter(|s| r.rows.iter().any(|row| row.shape.name == s.name))
        .collect();
    let heights: Vec<u32> = shapes
        .iter()
        .map(|s| {
            let n = r.rows.iter().filter(|row| row.shape.name == s.name).count() as u32;
            n * BAR_HEIGHT + PANEL_CHROME
        })
        .collect();
    let height = TITLE_HEIGHT + heights.iter().sum::<u32>().max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (title, mut body) = root.split_vertically(TITLE_HEIGHT);
        let machine = super::machine(r.pinning.available.len());
        title
            .draw_text(
                &format!(
                    "berth lab: {} cores, kernel {}; {}; {:.0} s per run. * client-bound",
                    machine["cores"],
                    machine["kernel"].as_str().unwrap_or("?"),
                    r.pinning.describe(),
                    r.config.duration.as_secs_f64()
                ),
                &("sans-serif", 16).into_font().color(&BLACK),
                (10, 15),
            )
            .map_err(err)?;
        for (shape, h) in shapes.iter().zip(heights) {
            let (band, rest) = body.split_vertically(h);
            body = rest;
            let rows: Vec<_> = r
                .rows
                .iter()
                .filter(|row| row.shape.name == shape.name)
                .collect();
            let names: Vec<String> = rows
                .iter()
                .map(|row| {
                    format!(
                        "{}{}",
                        row.server,
                        if row.client_bound() { "*" } else { "" }
                    )
                })
                .collect();
            let colors: Vec<RGBColor> = rows
                .iter()
                .map(|row| if row.kind == "berth" { BERTH } else { PEER })
                .collect();
            let rps: Vec<f64> = rows
                .iter()
                .map(|row| row.report.requests_per_sec())
                .collect();
            let p99: Vec<f64> = rows
                .iter()
                .map(|row| row.report.latency().p99 as f64 / 1000.0)
                .collect();
            let halves = band.split_evenly((1, 2));
            let caption = |what: &str| format!("{}: {what}", shape.title);
            bars(&halves[0], &caption("requests/s"), &names, &colors, &rps)?;
            bars(
                &halves[1],
                &caption("p99 latency, ms"),
                &names,
                &colors,
                &p99,
            )?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    names: &[String],
    colors: &[RGBColor],
    values: &[f64],
) -> Result<(), String> {
    let max = values.iter().copied().fold(0.0, f64::max).max(1e-3) * 1.15;
    let n = names.len();
    // Segment 0 is drawn at the bottom; the table's first server belongs at the top.
    let slot = |i: usize| n - 1 - i;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 13))
        .margin(6)
        .x_label_area_size(22)
        .y_label_area_size(130)
        .build_cartesian_2d(0f64..max, (0..n).into_segmented())
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) if *i < n => names[slot(*i)].clone(),
            SegmentValue::CenterOf(_) | SegmentValue::Exact(_) => String::new(),
            SegmentValue::Last => String::new(),
        })
        .x_labels(6)
        .x_label_formatter(&|v| format_value(*v).trim().to_owned())
        .draw()
        .map_err(err)?;
    chart
        .draw_series(values.iter().enumerate().map(|(i, &v)| {
            let mut bar = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(slot(i))),
                    (v, SegmentValue::Exact(slot(i) + 1)),
                ],
                colors[i].filled(),
            );
            bar.set_margin(3, 3, 0, 0);
            bar
        }))
        .map_err(err)?;
    chart
        .draw_series(values.iter().enumerate().map(|(i, &v)| {
            Text::new(
                format_value(v),
                (v, SegmentValue::CenterOf(slot(i))),
                ("sans-serif", 11).into_font().color(&BLACK),
            )
        }))
        .map_err(err)?;
    Ok(())
}

fn format_value(v: f64) -> String {
    if v == 0.0 {
        " 0".to_owned()
    } else if v >= 10.0 {
        format!(" {v:.0}")
    } else {
        format!(" {v:.2}")
    }
}

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("cannot draw the chart: {e}")
}
