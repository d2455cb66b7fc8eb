//! `external_annotations` (2.5 on): the user's named START/END marks on a
//! device's timeline.

use super::value::{Stop, as_i64, as_str, as_u64, dict_items, get, list_items};
use super::words::{DEVICE, END, NAME, STAGE, START, TIME_US};
use crate::error::ReadError;
use crate::pickle::{Heap, V, Value};
use crate::snapshot::model::{Annotation, AnnotationStage};

/// `external_annotations`: every mark, with a path in the error of any
/// malformed one. Each mark and its name are charged to the budget: a
/// name shared through the memo is one string in the pickle but a copy
/// per mark here.
pub(super) fn external_annotations(heap: &mut Heap, v: Value, stop: &Stop) -> Result<Vec<Annotation>, ReadError> {
    let items = list_items(heap, v, &|| "external_annotations".to_owned())?;
    let mut out = Vec::with_capacity(items.len());
    for (i, a) in items.into_iter().enumerate() {
        if i.is_multiple_of(4096) {
            stop.check()?;
        }
        let base = || format!("external_annotations[{i}]");
        let fields = dict_items(heap, a, &base)?;
        let path_of = |f: &'static str| move || format!("external_annotations[{i}].{f}");
        let stage = match get(&fields, STAGE).map(|v| v.get()) {
            Some(V::Str(START)) => AnnotationStage::Start,
            Some(V::Str(END)) => AnnotationStage::End,
            _ => {
                let found = get(&fields, STAGE).map_or("nothing".to_owned(), |v| heap.describe(v));
                return Err(ReadError::WrongType { path: path_of("stage")(), expected: "\"START\" or \"END\"", found });
            }
        };
        let name = match get(&fields, NAME) {
            Some(n) => Some(as_str(heap, n, &path_of("name"))?),
            None => None,
        };
        let cost = std::mem::size_of::<Annotation>() + name.map_or(0, |n| heap.str(n).len());
        heap.charge(cost as u64, || format!("external_annotations[{i}]: the marks and their names"), stop.offset)?;
        let name = name.map_or_else(String::new, |n| heap.str(n).to_owned());
        let device = match get(&fields, DEVICE) {
            Some(d) => as_u64(heap, d, &path_of("device"))? as u32,
            None => 0,
        };
        let time_us = match get(&fields, TIME_US) {
            Some(t) => as_i64(heap, t, &path_of("time_us"))?,
            None => 0,
        };
        out.push(Annotation { device, stage, name, time_us });
    }
    Ok(out)
}
