//! The SVG plots of `bench` and `soak` (plotters, SVG backend only): panels stacked over one
//! time axis, each with line series and optional horizontal reference lines (the watermarks).

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// One line.
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) color: RGBColor,
}

/// One panel: its y axis, its lines and its reference lines (label, y).
pub(crate) struct Panel {
    pub(crate) y_desc: String,
    pub(crate) series: Vec<Series>,
    pub(crate) references: Vec<(String, f64)>,
}

/// Colors that stay apart in print and for most color vision (Okabe-Ito).
pub(crate) const COLORS: [RGBColor; 4] =
    [RGBColor(0, 114, 178), RGBColor(213, 94, 0), RGBColor(0, 158, 115), RGBColor(204, 121, 167)];

/// Writes `panels`, stacked, to `path` as SVG.
pub(crate) fn write_svg(path: &Path, title: &str, x_desc: &str, panels: &[Panel]) -> anyhow::Result<()> {
    let height = 60 + 320 * panels.len() as u32;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len(), 1));
    let x_max = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|(x, _)| *x)))
        .fold(1.0f64, f64::max);
    for (area, panel) in areas.iter().zip(panels) {
        let y_max = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|(_, y)| *y))
            .chain(panel.references.iter().map(|(_, y)| *y))
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(panel.y_desc.as_str())
            .y_label_formatter(&|y| short(*y))
            .draw()
            .map_err(|e| err(&e))?;
        for series in &panel.series {
            let color = series.color;
            chart
                .draw_series(LineSeries::new(series.points.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(series.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        for ((label, y), shade) in panel.references.iter().zip([60u8, 160, 200].iter().cycle()) {
            let grey = RGBColor(*shade, *shade, *shade);
            chart
                .draw_series(LineSeries::new([(0.0, *y), (x_max, *y)], grey.stroke_width(1)))
                .map_err(|e| err(&e))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(1)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// An axis label: 1.5M, 250k, 12.
pub(crate) fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(250_000.0), "250k");
        assert_eq!(short(12.0), "12");
    }

    #[test]
    fn writes_an_svg_with_its_labels() {
        let path = std::env::temp_dir().join(format!("xtask-plot-{}.svg", std::process::id()));
        let panel = Panel {
            y_desc: "records/s".into(),
            series: vec![Series { label: "pipeline".into(), points: vec![(0.0, 1.0), (1.0, 2e6)], color: COLORS[0] }],
            references: vec![("high watermark".into(), 1e6)],
        };
        write_svg(&path, "a title", "seconds", &[panel]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        for text in ["a title", "pipeline", "high watermark", "records/s", "2.0M"] {
            assert!(svg.contains(text), "{text} is in the plot");
        }
    }
}
