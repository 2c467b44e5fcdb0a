/* Exports of the simulated chip backend (libkiln_sim_driver.so) beyond the driver ABI:
 * injecting and clearing faults at run time, for tests and demos. Real backends have no such
 * functions; find them with dlsym on the sim library only. */
#ifndef KILN_SIM_DRIVER_H
#define KILN_SIM_DRIVER_H

#include <stdint.h>

#include "drivers/kiln_driver.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_SIM_INJECT_FAULT_SYMBOL "kiln_sim_inject_fault"
#define KILN_SIM_CLEAR_FAULTS_SYMBOL "kiln_sim_clear_faults"

/* Injects a fault on one chip of the node kept in state_dir (which a driver open created).
 * kind: ecc_storm, thermal_throttle, hang, link_down, slow, sdc, flash_fail, nan_loss,
 * loss_spike, throughput_decay.
 * factor: slow speed factor or sdc corruption rate in (0, 1], loss_spike multiplier in
 * (1, 1000], throughput_decay fraction per hour in (0, 1]; 0 for the kind's default.
 * mode: flash_fail mode "flash" or "activate"; NULL or "" for "flash".
 * Replaces an earlier fault of the same kind on that chip. */
typedef kiln_driver_status (*kiln_sim_inject_fault_fn)(const char* state_dir, uint32_t chip,
                                                       const char* kind, double factor,
                                                       const char* mode, char* error,
                                                       uint32_t error_size);
KILN_DRIVER_EXPORT kiln_driver_status kiln_sim_inject_fault(const char* state_dir, uint32_t chip,
                                                            const char* kind, double factor,
                                                            const char* mode, char* error,
                                                            uint32_t error_size);

/* Clears every fault of one chip, or of all chips when chip is negative. */
typedef kiln_driver_status (*kiln_sim_clear_faults_fn)(const char* state_dir, int32_t chip,
                                                       char* error, uint32_t error_size);
KILN_DRIVER_EXPORT kiln_driver_status kiln_sim_clear_faults(const char* state_dir, int32_t chip,
                                                            char* error, uint32_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KILN_SIM_DRIVER_H */
