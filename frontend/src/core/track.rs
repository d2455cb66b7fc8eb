//! The track under the timeline, natively tested: its lanes (marks on top,
//! then one per nesting level of `record_function` ranges), where a
//! comment or search match sits on an axis, what is under the pointer, and
//! its drawing through a [`Painter`] ([`draw`]).

use vramscope_shared::api::review::Comment;
use vramscope_shared::timeline::Axis;
use vramscope_shared::views::annotations::{AnnotationRange, AnnotationsAnswer};
use vramscope_shared::views::search::SearchMatch;

use crate::core::axes;
use crate::core::format;
use crate::core::paint::{self, Font, Painter};
use crate::core::palette;
use crate::core::panel::Aligned;
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

/// What the track marks besides its ranges, as x on its axis: search
/// matches, comments and the cursor.
#[derive(Clone, Debug, Default)]
pub struct Marks {
    /// The search matches.
    pub matches: Vec<i64>,
    /// The review comments.
    pub comments: Vec<i64>,
    /// The cursor.
    pub cursor: Option<i64>,
}

/// Draw the track at `at`: the ranges of `ranges` in their lanes, the
/// matches and comments in the marks' lane, the cursor, and the lanes'
/// names left of the plot.
pub fn draw(p: &mut impl Painter, at: &Aligned, ranges: Option<&AnnotationsAnswer>, marks: &Marks) {
    let Aligned { view: v, left, width, .. } = *at;
    let h = height(ranges);
    p.clip((left, 0.0, width, h));
    let x_of = |x: i64| axes::x_px(v, left, width, x as f64);
    for range in ranges.iter().flat_map(|r| &r.ranges) {
        if range.end <= v.start || range.start >= v.end || range.depth >= LEVELS {
            continue;
        }
        let (x0, x1) = (x_of(range.start).max(left - 1.0), x_of(range.end).min(left + width + 1.0));
        draw_range(p, range, (x0, x1), left);
    }
    for &x in marks.matches.iter().filter(|&&x| at.shows(x)) {
        p.fill_rect(palette::MATCH, (x_of(x) - 1.0, 2.0, 2.0, LANE - 4.0));
    }
    for &x in marks.comments.iter().filter(|&&x| at.shows(x)) {
        // A triangle pointing down at the comment's x.
        let px = x_of(x);
        p.fill_path(palette::COMMENT, &[(px - 5.0, 1.0), (px + 5.0, 1.0), (px, LANE - 3.0)]);
    }
    if let Some(x) = at.visible(marks.cursor) {
        paint::vline(p, palette::CURSOR, x_of(x), (0.0, h), 1.0);
    }
    p.unclip();
    p.text(Font::label(palette::LABEL), "marks", 4.0, 12.0);
    if ranges.is_some_and(|r| r.levels > 0) {
        p.text(Font::label(palette::LABEL), "annotations", 4.0, LANE + 12.0);
    }
}

/// A range drawn from `x0` to `x1` in its level's lane, named when wide
/// enough (the name starting at the plot's `left` at the earliest).
fn draw_range(p: &mut impl Painter, range: &AnnotationRange, (x0, x1): (f64, f64), left: f64) {
    let y = LANE * (1.0 + f64::from(range.depth));
    let colour = palette::LEVELS[range.depth as usize % palette::LEVELS.len()];
    p.fill_rect(colour, (x0, y + 1.0, (x1 - x0).max(1.0), LANE - 2.0));
    p.stroke_rect(palette::AXIS, 1.0, (x0 + 0.5, y + 1.5, (x1 - x0 - 1.0).max(0.0), LANE - 3.0));
    if x1 - x0 > 40.0 {
        p.clip((x0, y, x1 - x0 - 2.0, LANE));
        p.text(Font::label(palette::TEXT), &range.name, x0.max(left) + 3.0, y + 12.0);
        p.unclip();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_ranges_of_gpt_varlen_fill_their_lanes_under_the_marks() {
        use crate::core::paint::{Op, Recorder};
        use vramscope_shared::views::annotations::AnnotationsParams;
        use vramscope_shared::views::view::{Annotations, View};
        let a = vramscope_shared::testing::corpus("gpt_varlen");
        let params = AnnotationsParams { axis: Some(Axis::Event), ..Default::default() };
        let r = Annotations::answer(&a, &params).expect("annotations");
        assert!(r.levels > 0 && !r.ranges.is_empty());
        // The window of the longest range: it and those beside it drawn.
        let long = r.ranges.iter().max_by_key(|x| x.end - x.start).expect("ranges");
        let view = Window::new(long.start, long.end + 1);
        let at = Aligned { view, left: 62.0, width: 1200.0, css_w: 1300.0 };
        let mid = (long.start + long.end) / 2;
        let marks = Marks { matches: vec![long.start, long.end + 5], comments: vec![mid], cursor: Some(mid) };
        let mut p = Recorder::new(1.0);
        draw(&mut p, &at, Some(&r), &marks);
        let h = height(Some(&r));
        assert_eq!(p.ops[0], Op::Clip((62.0, 0.0, 1200.0, h)));
        // One box and one outline per range drawn, in its level's lane.
        let drawn: Vec<_> =
            r.ranges.iter().filter(|x| x.depth < LEVELS && x.end > view.start && x.start < view.end).collect();
        let outlines: Vec<_> = p.ops.iter().filter(|o| matches!(o, Op::StrokeRect(..))).collect();
        assert_eq!(outlines.len(), drawn.len());
        for range in &drawn {
            let colour = palette::LEVELS[range.depth as usize % palette::LEVELS.len()];
            let y = LANE * (1.0 + f64::from(range.depth)) + 1.0;
            assert!(p.rects(colour).iter().any(|&(_, top, w, _)| top == y && w >= 1.0), "{}", range.name);
        }
        // The wide ones named, inside their own clip.
        let names: Vec<_> = p.texts().into_iter().filter(|t| *t != "marks" && *t != "annotations").collect();
        assert!(names.contains(&long.name.as_str()) && names.len() <= drawn.len(), "{names:?}");
        assert!(names.iter().all(|n| drawn.iter().any(|r| r.name == *n)));
        // Only the match inside the window, the comment's triangle, the cursor.
        assert_eq!(p.rects(palette::MATCH).len(), 1);
        assert_eq!(p.fills(palette::COMMENT).len(), 1);
        assert_eq!(p.strokes(palette::CURSOR).len(), 1);
        assert_eq!(p.texts()[p.texts().len() - 2..], ["marks", "annotations"]);
        let last_unclip = p.ops.iter().rposition(|o| *o == Op::Unclip).expect("unclipped");
        assert!(matches!(p.ops[last_unclip + 1], Op::Text(_, ref t, _) if t == "marks"));
    }
}
