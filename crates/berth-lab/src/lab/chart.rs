//! `lab.svg`: one row of panels per load shape, one bar per server — requests/s, p99 latency
//! (on a log scale, so one slow server does not flatten every other bar), server CPU µs per
//! request (the figure to compare on client-bound rows) and errors by kind — with a legend, the
//! servers a shape left out and why, and the notes that explain known errors. Numbers carry
//! thousands separators.

use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, SegmentValue, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::notes::{self, Notes};
use super::shapes::SHAPES;
use super::{LabReport, Row};

const WIDTH: u32 = 1500;
const HEADER_HEIGHT: u32 = 64;
const SHAPE_TITLE: u32 = 26;
const BAR_HEIGHT: u32 = 22;
const PANEL_CHROME: u32 = 56;
const LINE: u32 = 18;
/// Characters per line of a note, at the notes' font size.
const WRAP: usize = 240;
/// Width of the server names beside each panel.
const NAMES: u32 = 120;
/// Panel widths, left to right: requests/s, p99, CPU µs/request, errors. They add up to WIDTH.
const PANELS: [u32; 4] = [390, 390, 390, 330];

const BERTH: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
const PEER: RGBColor = RGBColor(0xdd, 0x84, 0x52);
const ERROR: RGBColor = RGBColor(0xc0, 0x1c, 0x28);
const MUTED: RGBColor = RGBColor(0x70, 0x70, 0x70);

/// Renders the chart as an SVG document.
pub fn render(r: &LabReport) -> Result<String, String> {
    let notes = Notes::of(r);
    let shapes: Vec<_> = SHAPES
        .iter()
        .filter(|s| r.rows.iter().any(|row| row.shape.name == s.name))
        .collect();
    let heights: Vec<u32> = shapes
        .iter()
        .map(|s| {
            let n = r.rows.iter().filter(|row| row.shape.name == s.name).count() as u32;
            let left_out = notes::not_run(r, s.name).len() as u32;
            SHAPE_TITLE + n * BAR_HEIGHT + PANEL_CHROME + left_out * LINE
        })
        .collect();
    let footer: Vec<String> = notes
        .list()
        .flat_map(|(n, text)| wrap(&format!("[{n}] {text}"), WRAP))
        .collect();
    let footer_height = footer.len() as u32 * LINE + LINE;
    let height = HEADER_HEIGHT + heights.iter().sum::<u32>() + footer_height;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (header, rest) = root.split_vertically(HEADER_HEIGHT);
        draw_header(&header, r)?;
        let (mut body, footer_area) = rest.split_vertically(height - HEADER_HEIGHT - footer_height);
        for (shape, h) in shapes.iter().zip(heights) {
            let (band, below) = body.split_vertically(h);
            body = below;
            let rows: Vec<&Row> = r
                .rows
                .iter()
                .filter(|row| row.shape.name == shape.name)
                .collect();
            let left_out = notes::not_run(r, shape.name);
            let (title, panels) = band.split_vertically(SHAPE_TITLE);
            title
                .draw_text(
                    &format!("{} [{}]", shape.title, shape.name),
                    &("sans-serif", 15)
                        .into_font()
                        .style(FontStyle::Bold)
                        .color(&BLACK),
                    (10, 6),
                )
                .map_err(err)?;
            let (panels, missing) =
                panels.split_vertically(h - SHAPE_TITLE - left_out.len() as u32 * LINE);
            for (i, text) in left_out.iter().enumerate() {
                missing
                    .draw_text(
                        &format!("not run: {text}"),
                        &("sans-serif", 12).into_font().color(&MUTED),
                        (NAMES as i32, i as i32 * LINE as i32 + 2),
                    )
                    .map_err(err)?;
            }
            draw_shape(&panels, &rows, &notes)?;
        }
        for (i, line) in footer.iter().enumerate() {
            footer_area
                .draw_text(
                    line,
                    &("sans-serif", 12).into_font().color(&BLACK),
                    (10, (i as u32 * LINE + LINE / 2) as i32),
                )
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The title line and the legend.
fn draw_header<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    r: &LabReport,
) -> Result<(), String> {
    let machine = super::machine(r.pinning.available.len());
    area.draw_text(
        &format!(
            "berth lab: {} cores, kernel {}; {}; {:.0} s per run",
            machine["cores"],
            machine["kernel"].as_str().unwrap_or("?"),
            r.pinning.describe(),
            r.config.duration.as_secs_f64()
        ),
        &("sans-serif", 16).into_font().color(&BLACK),
        (10, 10),
    )
    .map_err(err)?;
    let font = ("sans-serif", 13).into_font();
    let y = 40;
    let mut x = 10;
    for (color, label) in [(BERTH, "berth model"), (PEER, "peer server")] {
        area.draw(&Rectangle::new(
            [(x, y - 5), (x + 14, y + 9)],
            color.filled(),
        ))
        .map_err(err)?;
        area.draw_text(label, &font.color(&BLACK), (x + 20, y - 4))
            .map_err(err)?;
        x += 130;
    }
    area.draw_text(
        "name*  client-bound: the load generator was the bottleneck, so compare CPU µs/request, \
         not requests/s",
        &font.color(&BLACK),
        (x, y - 4),
    )
    .map_err(err)?;
    area.draw_text(
        "errors in red, by kind; [n]: see the notes below",
        &font.color(&ERROR),
        (x + 640, y - 4),
    )
    .map_err(err)?;
    Ok(())
}

/// The four panels of one shape.
fn draw_shape<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[&Row],
    notes: &Notes,
) -> Result<(), String> {
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
    let mut cuts = Vec::new();
    let mut at = 0;
    for w in &PANELS[..PANELS.len() - 1] {
        at += *w as i32;
        cuts.push(at);
    }
    let panels = area.split_by_breakpoints(cuts, Vec::<i32>::new());

    let rps: Vec<Option<f64>> = rows
        .iter()
        .map(|row| Some(row.report.requests_per_sec()))
        .collect();
    let max = rps.iter().flatten().copied().fold(0.0, f64::max).max(1.0);
    bars(
        &panels[0],
        "requests/s",
        &names,
        &colors,
        &rps,
        0.0..max * 1.3,
        0.0,
    )?;

    // p99 is 0 only when nothing was answered: no bar then.
    let p99: Vec<Option<f64>> = rows
        .iter()
        .map(|row| Some(row.report.latency().p99 as f64 / 1000.0).filter(|v| *v > 0.0))
        .collect();
    let lo = p99.iter().flatten().copied().fold(f64::MAX, f64::min);
    let hi = p99.iter().flatten().copied().fold(0.0, f64::max);
    let (lo, hi) = if hi > 0.0 {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf((hi * 3.0).log10().ceil()),
        )
    } else {
        (0.1, 10.0)
    };
    bars(
        &panels[1],
        "p99 latency, ms (log scale)",
        &names,
        &colors,
        &p99,
        (lo..hi).log_scale(),
        lo,
    )?;

    let cpu: Vec<Option<f64>> = rows.iter().map(|row| row.cpu_us_per_request()).collect();
    let max = cpu.iter().flatten().copied().fold(0.0, f64::max).max(1e-3);
    bars(
        &panels[2],
        "server CPU µs per request",
        &names,
        &colors,
        &cpu,
        0.0..max * 1.3,
        0.0,
    )?;

    let errors: Vec<(String, RGBColor)> = rows
        .iter()
        .map(|row| {
            let e = &row.report.tally.errors;
            if e.total() == 0 {
                ("none".to_owned(), MUTED)
            } else {
                (
                    format!("{}{}", notes::error_kinds(e), notes.marker(row)),
                    ERROR,
                )
            }
        })
        .collect();
    texts(&panels[3], "errors", &names, &errors)
}

/// Horizontal bars, one per server, the first at the top, each labelled with its value.
/// `floor` is where a bar starts (the axis' low end: 0, or on a log scale its first decade).
fn bars<DB: DrawingBackend, X>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    names: &[String],
    colors: &[RGBColor],
    values: &[Option<f64>],
    x: X,
    floor: f64,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let n = names.len();
    // Segment 0 is drawn at the bottom; the table's first server belongs at the top.
    let slot = |i: usize| n - 1 - i;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 13))
        .margin(6)
        .x_label_area_size(20)
        .y_label_area_size(NAMES)
        .build_cartesian_2d(x, (0..n).into_segmented())
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
        .x_labels(5)
        .x_label_formatter(&|v| axis_label(*v))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(values.iter().enumerate().filter_map(|(i, v)| {
            let v = (*v)?;
            let mut bar = Rectangle::new(
                [
                    (floor, SegmentValue::Exact(slot(i))),
                    (v.max(floor), SegmentValue::Exact(slot(i) + 1)),
                ],
                colors[i].filled(),
            );
            bar.set_margin(3, 3, 0, 0);
            Some(bar)
        }))
        .map_err(err)?;
    chart
        .draw_series(values.iter().enumerate().map(|(i, v)| {
            let (text, at) = match v {
                Some(v) => (format!(" {}", notes::figure(*v)), v.max(floor)),
                None => (" -".to_owned(), floor),
            };
            Text::new(
                text,
                (at, SegmentValue::CenterOf(slot(i))),
                label_style(&BLACK),
            )
        }))
        .map_err(err)?;
    Ok(())
}

/// Value labels: vertically centred on their bar.
fn label_style(color: &RGBColor) -> TextStyle<'static> {
    ("sans-serif", 11)
        .into_font()
        .color(color)
        .pos(Pos::new(HPos::Left, VPos::Center))
}

/// Axis ticks: `0`, `0.5`, `10`, `1,000`.
fn axis_label(v: f64) -> String {
    if v >= 1.0 && v.fract() == 0.0 {
        notes::thousands(v as u64)
    } else if v == 0.0 {
        "0".to_owned()
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// A column of text, one line per server, aligned with the bars beside it.
fn texts<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    names: &[String],
    lines: &[(String, RGBColor)],
) -> Result<(), String> {
    let n = names.len();
    let slot = |i: usize| n - 1 - i;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 13))
        .margin(6)
        .x_label_area_size(20)
        .y_label_area_size(0)
        .build_cartesian_2d(0f64..1.0, (0..n).into_segmented())
        .map_err(err)?;
    chart
        .draw_series(lines.iter().enumerate().map(|(i, (text, color))| {
            Text::new(
                text.clone(),
                (0.02, SegmentValue::CenterOf(slot(i))),
                label_style(color),
            )
        }))
        .map_err(err)?;
    Ok(())
}

/// Splits `text` into lines of at most `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("cannot draw the chart: {e}")
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn axis_labels() {
        assert_eq!(super::axis_label(1.0), "1");
        assert_eq!(super::axis_label(10_000.0), "10,000");
        assert_eq!(super::axis_label(0.1), "0.1");
        assert_eq!(super::axis_label(2.5), "2.5");
        assert_eq!(super::axis_label(0.0), "0");
    }

    #[test]
    fn wraps_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("", 5), Vec::<String>::new());
    }
}
