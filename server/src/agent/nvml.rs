//! Device totals and per-process memory from NVML, which sees memory held
//! outside PyTorch's allocator (CUDA contexts, NCCL buffers, other processes).
//!
//! `libnvidia-ml.so.1` is loaded at run time (nvml-wrapper uses libloading),
//! so the binary runs on machines without a GPU; there the agent says once
//! that NVML is missing and carries on without these figures.

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use vramscope_shared::api::agent::{NvmlDevice, NvmlProcess};

/// An initialised NVML library.
pub(crate) struct NvmlReader {
    nvml: Nvml,
}

impl NvmlReader {
    /// Loads and initialises NVML, or says why it cannot.
    pub(crate) fn open() -> Result<NvmlReader, String> {
        Nvml::init().map(|nvml| NvmlReader { nvml }).map_err(|e| {
            format!(
                "NVML is not available ({e}); is an NVIDIA driver installed (libnvidia-ml.so.1)? Device totals and \
                 per-process GPU memory will not be reported"
            )
        })
    }

    /// Every device's memory and compute processes. A device that fails to
    /// answer is left out rather than failing the others.
    pub(crate) fn read(&self) -> Vec<NvmlDevice> {
        let count = self.nvml.device_count().unwrap_or(0);
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            let Ok(device) = self.nvml.device_by_index(index) else { continue };
            let Ok(memory) = device.memory_info() else { continue };
            let processes = device
                .running_compute_processes()
                .unwrap_or_default()
                .into_iter()
                .map(|p| NvmlProcess {
                    pid: p.pid,
                    used: match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => i64::try_from(bytes).ok(),
                        UsedGpuMemory::Unavailable => None,
                    },
                })
                .collect();
            devices.push(NvmlDevice {
                index,
                name: device.name().unwrap_or_default(),
                total: i64::try_from(memory.total).unwrap_or(i64::MAX),
                used: i64::try_from(memory.used).unwrap_or(i64::MAX),
                free: i64::try_from(memory.free).unwrap_or(i64::MAX),
                processes,
            });
        }
        devices
    }
}

/// NVML's view of process `pid`: (used on its device by everyone, used by
/// the process summed over devices). `None`s when NVML does not list it
/// (e.g. a PID namespace hides host pids).
pub(crate) fn figures_for(devices: &[NvmlDevice], pid: u32) -> (Option<i64>, Option<i64>) {
    let mut device_used = None;
    let mut process_used: Option<i64> = None;
    for device in devices {
        for process in device.processes.iter().filter(|p| p.pid == pid) {
            device_used.get_or_insert(device.used);
            if let Some(used) = process.used {
                process_used = Some(process_used.unwrap_or(0) + used);
            }
        }
    }
    (device_used, process_used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_without_a_driver_says_what_is_missing() {
        // This machine has no NVIDIA driver; on a GPU host the reader opens.
        match NvmlReader::open() {
            Ok(reader) => assert!(!reader.read().is_empty()),
            Err(message) => assert!(message.contains("NVML is not available"), "{message}"),
        }
    }

    #[test]
    fn process_figures_sum_over_devices() {
        let device = |index, used, processes| NvmlDevice {
            index,
            name: "GPU".to_owned(),
            total: 100,
            used,
            free: 100 - used,
            processes,
        };
        let devices = vec![
            device(0, 40, vec![NvmlProcess { pid: 1, used: Some(10) }, NvmlProcess { pid: 2, used: Some(30) }]),
            device(1, 5, vec![NvmlProcess { pid: 1, used: Some(5) }]),
        ];
        assert_eq!(figures_for(&devices, 1), (Some(40), Some(15)));
        assert_eq!(figures_for(&devices, 2), (Some(40), Some(30)));
        assert_eq!(figures_for(&devices, 3), (None, None));
    }
}
