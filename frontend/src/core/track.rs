//! The track under the timeline, natively tested: its lanes (marks on top,
//! then one per nesting level of `record_function` ranges), where a
//! comment or search match sits on an axis, and what is under the pointer.

use vramscope_shared::api::review::Comment;
use vramscope_shared::timeline::Axis;
use vramscope_shared::views::annotations::AnnotationsAnswer;
use vramscope_shared::views::search::SearchMatch;

use crate::core::format;
use crate::core::viewport::Window;

/// Height of a lane.
pub const LANE: f64 = 16.0;
/// Nesting levels drawn; deeper ranges are left out.
pub const LEVELS: u32 = 6;

/// The track's height for `ranges` (the marks' lane and one per level).
pub fn height(ranges: Option<&AnnotationsAnswer>) -> f64 {
    let levels = ranges.map_or(0, |r| r.levels.min(LEVELS));
    LANE * (1.0 + f64::from(levels))
}

/// Where a comment sits on `axis`.
pub fn comment_x(c: &Comment, axis: Axis) -> Option<i64> {
    match axis {
        Axis::Event => c.row.map(i64::from),
        Axis::Time => c.time_us,
    }
}

/// Where a search match's allocation sits on `axis`.
pub fn match_x(m: &SearchMatch, axis: Axis) -> Option<i64> {
    match axis {
        Axis::Event => m.alloc_row.map(i64::from),
        Axis::Time => m.alloc_time_us,
    }
}

/// What is under the pointer at `(px, py)` of a track whose plot area
/// `(left, width)` shows `view` on `axis`: a comment in the marks' lane
/// (within four pixels), or a range in its level's lane, with the window
/// a click zooms to. What to say of it, in words.
pub fn hit(
    ranges: Option<&AnnotationsAnswer>,
    comments: &[Comment],
    (view, axis): (Window, Axis),
    (left, width): (f64, f64),
    (px, py): (f64, f64),
) -> Option<(Option<Window>, String)> {
    let x = (view.start as f64 + (px - left) / width.max(1.0) * view.width() as f64).floor() as i64;
    let slack = (view.width() as f64 * 4.0 / width.max(1.0)) as i64;
    if py < LANE {
        return comments
            .iter()
            .find(|c| comment_x(c, axis).is_some_and(|cx| (cx - x).abs() <= slack))
            .map(|c| (None, format!("comment by {}: {}", c.author, c.body)));
    }
    let depth = ((py / LANE).floor() as u32).saturating_sub(1);
    ranges?.ranges.iter().find(|r| r.depth == depth && r.start <= x && x < r.end).map(|r| {
        let lasted = r.end_us.map_or("never closed".to_owned(), |e| format::duration_us(e - r.start_us));
        (Some(Window::new(r.start, r.end)), format!("{} · {lasted}", r.name))
    })
}

/// The hint under the track when nothing is pointed at.
pub fn idle_hint(ranges: Option<&AnnotationsAnswer>) -> Option<String> {
    ranges
        .map(|r| r.total)
        .filter(|&n| n > 0)
        .map(|n| format!("{n} annotated ranges (record_function); click one to zoom to it"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_shared::views::annotations::AnnotationRange;

    fn ranges() -> AnnotationsAnswer {
        let range = |name: &str, start, end, depth, end_us| AnnotationRange {
            name: name.to_owned(),
            start,
            end,
            start_us: start * 10,
            end_us,
            depth,
        };
        AnnotationsAnswer {
            device: 0,
            axis: Axis::Event,
            ranges: vec![range("forward", 0, 500, 0, Some(5_000)), range("attn", 100, 200, 1, None)],
            total: 2,
            levels: 2,
        }
    }

    fn comment(row: Option<u32>, time_us: Option<i64>) -> Comment {
        Comment {
            id: "c".to_owned(),
            author: "ana".to_owned(),
            body: "here".to_owned(),
            created_ms: 0,
            row,
            time_us,
            addr: None,
        }
    }

    #[test]
    fn lanes_grow_with_the_levels_up_to_six() {
        assert_eq!(height(None), LANE);
        assert_eq!(height(Some(&ranges())), 3.0 * LANE);
        let deep = AnnotationsAnswer { levels: 40, ..ranges() };
        assert_eq!(height(Some(&deep)), 7.0 * LANE);
        assert_eq!(
            idle_hint(Some(&ranges())).as_deref(),
            Some("2 annotated ranges (record_function); click one to zoom to it")
        );
        assert_eq!(idle_hint(Some(&AnnotationsAnswer { total: 0, ..ranges() })), None);
    }

    #[test]
    fn comments_and_matches_sit_on_either_axis() {
        let c = comment(Some(7), Some(70));
        assert_eq!((comment_x(&c, Axis::Event), comment_x(&c, Axis::Time)), (Some(7), Some(70)));
        let m = SearchMatch { addr: 0, size: 1, stack: 0, alloc_row: Some(3), free_row: None, alloc_time_us: None };
        assert_eq!((match_x(&m, Axis::Event), match_x(&m, Axis::Time)), (Some(3), None));
    }

    #[test]
    fn the_pointer_finds_a_comment_or_the_range_of_its_lane() {
        // 1000 rows over 500 pixels from 100: two rows a pixel.
        let at = (Window::new(0, 1000), Axis::Event);
        let plot = (100.0, 500.0);
        let r = ranges();
        let comments = [comment(Some(300), None)];
        // The marks' lane: a comment within 4 pixels (8 rows).
        assert_eq!(hit(Some(&r), &comments, at, plot, (253.0, 5.0)), Some((None, "comment by ana: here".to_owned())));
        assert_eq!(hit(Some(&r), &comments, at, plot, (260.0, 5.0)), None);
        // Level 0's lane, then level 1's.
        assert_eq!(
            hit(Some(&r), &comments, at, plot, (110.0, LANE + 2.0)),
            Some((Some(Window::new(0, 500)), "forward · 5.0 ms".to_owned()))
        );
        assert_eq!(
            hit(Some(&r), &comments, at, plot, (175.0, 2.0 * LANE + 2.0)),
            Some((Some(Window::new(100, 200)), "attn · never closed".to_owned()))
        );
        assert_eq!(hit(None, &comments, at, plot, (175.0, 2.0 * LANE + 2.0)), None);
    }
}
