//! What the fragmentation panel says, natively tested: the scale of its
//! curves, the instant where the most free bytes were stuck in split
//! segments, and the recorded allocator settings in words.

use vramscope_shared::views::fragmentation::{FragmentationAnswer, SettingsView};

use crate::core::format;

/// The bytes the top of the chart stands for: the largest reserved figure
/// of the window (at least 1).
pub fn top(answer: &FragmentationAnswer) -> f64 {
    answer.columns.iter().map(|c| c.figures.reserved).max().unwrap_or(1).max(1) as f64
}

/// The window's worst instant, when any free bytes were stuck in split
/// segments: what to say of it, and its row (a button moves the cursor
/// there).
pub fn worst(answer: &FragmentationAnswer) -> Option<(String, Option<u32>)> {
    let w = answer.worst?;
    let f = w.figures;
    (f.inactive_split > 0).then(|| {
        let text = format!(
            "Most free bytes stuck in split segments: {} of {} reserved ({} free in all, largest free block {}). ",
            format::bytes(f.inactive_split),
            format::bytes(f.reserved),
            format::bytes(f.inactive),
            format::bytes(f.largest_free),
        );
        (text, w.column.row)
    })
}

/// The recorded allocator settings as the panel lists them.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `PYTORCH_CUDA_ALLOC_CONF`, or that it was not set.
    pub conf: String,
    /// `expandable_segments`: "on" or "off".
    pub expandable: &'static str,
    /// `max_split_size`.
    pub split: String,
    /// `garbage_collection_threshold`.
    pub gc: String,
}

impl Settings {
    /// The settings of `s`, in words (`None`: the snapshot recorded none).
    pub fn of(s: &SettingsView) -> Option<Settings> {
        if !s.recorded {
            return None;
        }
        Some(Settings {
            conf: s.alloc_conf.clone().unwrap_or_else(|| "not set (defaults)".to_owned()),
            expandable: if s.expandable_segments { "on" } else { "off" },
            split: s.max_split_size.map_or("unlimited".to_owned(), format::bytes),
            gc: if s.garbage_collection_threshold > 0.0 {
                format!("{}", s.garbage_collection_threshold)
            } else {
                "off".to_owned()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_shared::views::fragmentation::FragmentationColumn;
    use vramscope_shared::views::segments::Column;
    use vramscope_shared::views::state::Figures;

    fn column(row: u32, reserved: u64, inactive_split: u64) -> FragmentationColumn {
        let figures =
            Figures { reserved, inactive_split, inactive: inactive_split, largest_free: 512, ..Figures::default() };
        FragmentationColumn { column: Column { x0: i64::from(row), x1: i64::from(row) + 1, row: Some(row) }, figures }
    }

    fn answer(columns: Vec<FragmentationColumn>, worst: Option<FragmentationColumn>) -> FragmentationAnswer {
        FragmentationAnswer {
            device: 0,
            axis: vramscope_shared::timeline::Axis::Event,
            start: 0,
            end: 2,
            columns,
            worst,
            settings: SettingsView::default(),
            exact: true,
        }
    }

    #[test]
    fn the_chart_scales_to_the_largest_reservation_and_names_the_worst_instant() {
        let a = answer(vec![column(0, 2048, 0), column(1, 4096, 1024)], Some(column(1, 4096, 1024)));
        assert_eq!(top(&a), 4096.0);
        assert_eq!(top(&answer(vec![], None)), 1.0);
        let (text, row) = worst(&a).expect("bytes were stuck");
        assert_eq!(
            text,
            "Most free bytes stuck in split segments: 1.00 KiB of 4.00 KiB reserved (1.00 KiB free in all, largest free block 512 B). "
        );
        assert_eq!(row, Some(1));
        // Nothing stuck: nothing to show.
        assert!(worst(&answer(vec![], Some(column(1, 4096, 0)))).is_none());
    }

    #[test]
    fn settings_are_said_in_words_or_not_at_all() {
        assert_eq!(Settings::of(&SettingsView::default()), None);
        let s = SettingsView {
            recorded: true,
            max_split_size: Some(1 << 20),
            garbage_collection_threshold: 0.6,
            expandable_segments: true,
            ..SettingsView::default()
        };
        let said = Settings::of(&s).expect("recorded");
        assert_eq!(
            said,
            Settings {
                conf: "not set (defaults)".to_owned(),
                expandable: "on",
                split: "1.00 MiB".to_owned(),
                gc: "0.6".to_owned()
            }
        );
        let off =
            Settings::of(&SettingsView { recorded: true, alloc_conf: Some("x".to_owned()), ..SettingsView::default() });
        assert_eq!(
            off.map(|s| (s.conf, s.split, s.gc)),
            Some(("x".to_owned(), "unlimited".to_owned(), "off".to_owned()))
        );
    }
}
