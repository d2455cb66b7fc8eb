//! The memory a replay runs under when none is given: the cap the capture
//! recorded, or else the least a process that ran out had.
//!
//! Without a capacity, a replay honours the recorded OOM: it stops where
//! the run stopped, whatever the settings, so that every setting's row of a
//! what-if or a ranking says "OOM" and none says which setting avoids it.
//! When no capacity is given and the settings name none, a replay of such
//! a snapshot therefore runs under the least the process had when it ran
//! out ([`inferred_capacity`], the lower bound
//! `explain` gives), and says so. Replaying the recorded settings under it
//! fails at the recorded row by itself: the reserved peak before the OOM is
//! the bound, and the failed request did not fit.
//!
//! A cap the capture recorded (the process's memory fraction of the device,
//! `CaptureDevice::capacity_bytes`) is the truth the inferred bound
//! approximates: the precedence is a given capacity, then given settings'
//! `per_process_memory_fraction`, then the recorded cap, then the recorded
//! settings' fraction, then the inferred bound. Each answer says which
//! (`capacity_source`).

use super::oom::explain_device;
use crate::simulate::tune::TuneReport;
use crate::simulate::{SimError, SimulateOptions, Simulation, settings_for, simulate};
use crate::snapshot::{Action, DeviceSnapshot, Snapshot};

/// The cap the capture recorded ([`Snapshot::recorded_capacity`]) of the
/// first device with a trace that has one (a replay takes one capacity for
/// every device).
pub fn recorded_capacity(snapshot: &Snapshot) -> Option<u64> {
    snapshot.devices.iter().filter(|d| !d.trace.is_empty()).find_map(|d| snapshot.recorded_capacity(d.device))
}

/// The memory a process that ran out had, at least: the lower bound of its
/// first OOM's [`super::oom::OomReport::capacity_bytes_range`]. `None`
/// without a recorded OOM. What-ifs of such a snapshot replay under it by
/// default, so that each setting's row says whether it would have fitted
/// (without it, the recorded failure is honoured in every row).
pub fn inferred_capacity(snapshot: &Snapshot) -> Option<u64> {
    snapshot.devices.iter().find_map(|d| inferred_device_capacity(snapshot, d))
}

/// [`inferred_capacity`] of one device: from its own first OOM.
pub fn inferred_device_capacity(snapshot: &Snapshot, device: &DeviceSnapshot) -> Option<u64> {
    if device.trace.count(Action::Oom) == 0 {
        return None;
    }
    explain_device(snapshot, device).first().map(|r| r.capacity_bytes_range.0)
}

/// The capacity a replay of one device runs under, and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayCapacity {
    /// The bytes, `None` for no limit.
    pub bytes: Option<u64>,
    /// `"given"`, `"recorded"` or `"inferred"`; `None` without a capacity.
    pub source: Option<&'static str>,
}

impl ReplayCapacity {
    /// The precedence every replay follows: a given capacity, else the
    /// recorded cap, else the inferred bound (each looked for only when
    /// the one before is absent).
    fn first_of(
        given: Option<u64>,
        recorded: impl FnOnce() -> Option<u64>,
        inferred: impl FnOnce() -> Option<u64>,
    ) -> ReplayCapacity {
        let (bytes, source) = if given.is_some() {
            (given, "given")
        } else if let Some(recorded) = recorded() {
            (Some(recorded), "recorded")
        } else if let Some(inferred) = inferred() {
            (Some(inferred), "inferred")
        } else {
            return ReplayCapacity { bytes: None, source: None };
        };
        ReplayCapacity { bytes, source: Some(source) }
    }
}

/// The capacity a replay of `device` runs under: `given`, else the cap the
/// capture recorded for it, else the least it had when it ran out.
pub fn device_replay_capacity(snapshot: &Snapshot, device: &DeviceSnapshot, given: Option<u64>) -> ReplayCapacity {
    ReplayCapacity::first_of(
        given,
        || snapshot.recorded_capacity(device.device),
        || inferred_device_capacity(snapshot, device),
    )
}

/// The capacity a replay of the whole snapshot runs under (one for every
/// device): `given`, else the first traced device's recorded cap
/// ([`recorded_capacity`]), else the least the first device that ran out
/// had ([`inferred_capacity`]).
pub fn snapshot_replay_capacity(snapshot: &Snapshot, given: Option<u64>) -> ReplayCapacity {
    ReplayCapacity::first_of(given, || recorded_capacity(snapshot), || inferred_capacity(snapshot))
}

/// [`crate::simulate::tune::tune`] under [`snapshot_replay_capacity`]; the report
/// says where a capacity it was not given came from.
pub fn tune_with_inferred_capacity(
    snapshot: &Snapshot,
    capacity: Option<u64>,
    grid: &[&str],
) -> Result<TuneReport, SimError> {
    let chosen = snapshot_replay_capacity(snapshot, capacity);
    let mut report = crate::simulate::tune::tune(snapshot, chosen.bytes, grid)?;
    report.capacity_inferred = chosen.source == Some("inferred");
    if capacity.is_none() && chosen.source.is_some() {
        report.capacity_source = chosen.source;
    }
    Ok(report)
}

/// [`simulate`] under the options' capacity, or the one given settings'
/// `per_process_memory_fraction` gives, or the cap the capture recorded, or
/// the recorded settings' fraction, or else the inferred one. Granting
/// the recorded OOMs (`grant_recorded_ooms`) asks for no capacity at all,
/// so none is inferred then.
pub fn simulate_with_inferred_capacity(snapshot: &Snapshot, options: &SimulateOptions) -> Result<Simulation, SimError> {
    if options.capacity.is_some() || options.grant_recorded_ooms {
        return simulate(snapshot, options);
    }
    let (config, _) = settings_for(snapshot, options.alloc_conf.as_deref())?;
    let given_fraction = options.alloc_conf.is_some() && config.memory_fraction.is_some();
    if let Some(recorded) = recorded_capacity(snapshot).filter(|_| !given_fraction) {
        let mut sim = simulate(snapshot, &SimulateOptions { capacity: Some(recorded), ..options.clone() })?;
        sim.capacity_recorded = true;
        return Ok(sim);
    }
    let Some(inferred) = inferred_capacity(snapshot) else { return simulate(snapshot, options) };
    if config.memory_fraction.is_some() {
        // The fraction gives the exact capacity when the device's total is
        // known; only without it does the inferred one stand in.
        let plain = simulate(snapshot, options)?;
        if plain.capacity.is_some() {
            return Ok(plain);
        }
    }
    let mut sim = simulate(snapshot, &SimulateOptions { capacity: Some(inferred), ..options.clone() })?;
    sim.capacity_inferred = true;
    Ok(sim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::corpus;

    #[test]
    fn a_snapshot_that_ran_out_replays_under_the_least_it_had_and_fails_where_it_failed() {
        let a = corpus("oom_leak");
        let recorded = simulate(&a.snapshot, &SimulateOptions::default()).expect("replayed");
        let inferred = simulate_with_inferred_capacity(&a.snapshot, &SimulateOptions::default()).expect("replayed");
        assert!(inferred.capacity_inferred);
        assert_eq!(inferred.capacity, inferred_capacity(&a.snapshot));
        assert_eq!(inferred.report().capacity_source, Some("inferred"));
        let (r, i) = (&recorded.devices[0], &inferred.devices[0]);
        let (r_oom, i_oom) = (r.oom.as_ref().expect("recorded OOM"), i.oom.as_ref().expect("an OOM under the cap"));
        assert_eq!(i_oom.row, r_oom.row, "the same row, by the model's own decision");
        assert_eq!(i.stats.reserved_bytes.peak, r.stats.reserved_bytes.peak);
    }

    #[test]
    fn a_given_capacity_or_granted_ooms_infer_nothing() {
        let a = corpus("oom_leak");
        let given = SimulateOptions { capacity: Some(64 << 30), ..SimulateOptions::default() };
        let sim = simulate_with_inferred_capacity(&a.snapshot, &given).expect("replayed");
        assert_eq!((sim.capacity, sim.capacity_inferred), (Some(64 << 30), false));
        let granted = SimulateOptions { grant_recorded_ooms: true, ..SimulateOptions::default() };
        let sim = simulate_with_inferred_capacity(&a.snapshot, &granted).expect("replayed");
        assert_eq!((sim.capacity, sim.capacity_inferred), (None, false));
        let plain = corpus("streams");
        let sim = simulate_with_inferred_capacity(&plain.snapshot, &SimulateOptions::default()).expect("replayed");
        assert_eq!((sim.capacity, sim.capacity_inferred), (None, false), "no OOM, no capacity");
    }
}
