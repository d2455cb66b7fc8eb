//! Dates as the dashboard writes them, one format on every page (the
//! library, jobs, comments, live sources): `2026-12-07 20:45` in the
//! viewer's time zone, 24-hour, the same whatever the browser's locale,
//! and `20:45:07` for a time of day. The browser gives the fields
//! (`infra::clock`); the writing is here, tested natively.

/// A moment's calendar fields in the viewer's time zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalTime {
    /// Year, e.g. 2026.
    pub year: i32,
    /// Month, 1 to 12.
    pub month: u32,
    /// Day of the month, 1 to 31.
    pub day: u32,
    /// Hour, 0 to 23.
    pub hour: u32,
    /// Minute, 0 to 59.
    pub minute: u32,
    /// Second, 0 to 59.
    pub second: u32,
}

/// `2026-12-07 20:45`: year first, so that lists sort as they read and no
/// reader mistakes the day for the month.
pub fn date_time(t: &LocalTime) -> String {
    format!("{:04}-{:02}-{:02} {:02}:{:02}", t.year, t.month, t.day, t.hour, t.minute)
}

/// `20:45:07`.
pub fn time_of_day(t: &LocalTime) -> String {
    format!("{:02}:{:02}:{:02}", t.hour, t.minute, t.second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_read_the_same_in_every_locale() {
        let t = LocalTime { year: 2026, month: 3, day: 7, hour: 9, minute: 5, second: 2 };
        assert_eq!(date_time(&t), "2026-03-07 09:05");
        assert_eq!(time_of_day(&t), "09:05:02");
    }
}
