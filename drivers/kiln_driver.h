/* The kiln chip driver ABI: what a chip vendor's shared library implements so that the
 * kiln agent can own the host's chips. Plain C with fixed-size types so that any compiler
 * and language can implement it; the agent loads a backend with dlopen and reaches everything
 * through one exported entry point that returns a versioned table of function pointers.
 *
 * Rules every backend follows (docs/driver-abi.md is the full contract):
 * - Every function returns a kiln_driver_status; KILN_DRIVER_OK is 0. On failure the backend
 *   stores a message for the handle (what went wrong and what to do), readable with
 *   last_error until the next call on it.
 * - No exception, longjmp or signal ever crosses this boundary.
 * - A handle is used by one thread at a time; open one handle per thread if needed.
 * - Strings passed in are NUL-terminated UTF-8; strings returned in structs are NUL-terminated
 *   and truncated to their array size.
 */
#ifndef KILN_DRIVER_H
#define KILN_DRIVER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change to the table or the structs below. */
#define KILN_DRIVER_ABI_VERSION 1u

/* The one symbol the loader looks up. */
#define KILN_DRIVER_ENTRY_SYMBOL "kiln_driver_entry"

#if defined(__GNUC__)
#define KILN_DRIVER_EXPORT __attribute__((visibility("default")))
#else
#define KILN_DRIVER_EXPORT
#endif

#define KILN_DRIVER_SERIAL_MAX 64
#define KILN_DRIVER_REVISION_MAX 16
#define KILN_DRIVER_PCI_BUS_ID_MAX 32
#define KILN_DRIVER_FIRMWARE_VERSION_MAX 64
#define KILN_DRIVER_DETAIL_MAX 256
#define KILN_DRIVER_ERROR_MAX 512

typedef int32_t kiln_driver_status;

enum {
  KILN_DRIVER_OK = 0,
  KILN_DRIVER_E_INVALID_ARGUMENT = 1, /* a null pointer, bad pid, bad level, bad string */
  KILN_DRIVER_E_NO_SUCH_CHIP = 2,     /* chip index >= chip_count */
  KILN_DRIVER_E_UNSUPPORTED = 3,      /* this backend does not implement the operation */
  KILN_DRIVER_E_CONFIG = 4,           /* the options string given to open is invalid */
  KILN_DRIVER_E_IO = 5,               /* a file the driver needs could not be read or written */
  KILN_DRIVER_E_BUSY = 6,             /* the chip is bound to a live workload */
  KILN_DRIVER_E_STATE = 7,            /* not valid now: no previous slot, standby invalid */
  KILN_DRIVER_E_DEVICE = 8,           /* the chip failed the operation */
  KILN_DRIVER_E_FIRMWARE = 9,         /* writing or verifying a firmware image failed */
  KILN_DRIVER_E_BUFFER_TOO_SMALL = 10,/* an output buffer cannot hold the result */
  KILN_DRIVER_E_INTERNAL = 11         /* a bug or unexpected failure inside the backend */
};

/* Firmware slot numbers (uint32_t fields below). */
#define KILN_FIRMWARE_SLOT_A 0u
#define KILN_FIRMWARE_SLOT_B 1u
#define KILN_FIRMWARE_SLOT_NONE 0xFFFFFFFFu

enum {
  KILN_SELF_TEST_MEMORY = 1,       /* pattern test; measures memory bandwidth */
  KILN_SELF_TEST_INTERCONNECT = 2, /* chip-to-chip links; measures link bandwidth */
  KILN_SELF_TEST_COMPUTE = 3       /* matrix stress with known answers; measures TFLOP/s */
};

/* Self-test levels: 1 quick (seconds), 2 medium (about a minute), 3 long stress. */
#define KILN_SELF_TEST_LEVEL_MIN 1u
#define KILN_SELF_TEST_LEVEL_MAX 3u

/* Kernel launches (run_kernel): matrices of fp32 values, row-major. The kernel computes with the
 * chip's numerics (bf16 storage, fp32 accumulation, scaled E4M3 for fp8 gemm inputs) and
 * returns its stored results widened to fp32. Kernel names: gemm-bf16, gemm-fp8 (inputs a, b),
 * softmax, layernorm, gelu (one input), attention (q, k, v: one causal head). */
#define KILN_KERNEL_NAME_MAX 32
#define KILN_KERNEL_INPUTS_MAX 3
#define KILN_KERNEL_FLAG_CAUSAL 1u      /* softmax: mask column j > row i */
#define KILN_KERNEL_FLAG_TRANSPOSE_B 2u /* gemm: a times b transposed */

struct kiln_kernel_matrix {
  const float* data;
  uint32_t rows;
  uint32_t cols;
};

struct kiln_kernel_launch {
  char kernel[KILN_KERNEL_NAME_MAX];
  uint32_t flags; /* KILN_KERNEL_FLAG_* */
  uint32_t input_count;
  struct kiln_kernel_matrix inputs[KILN_KERNEL_INPUTS_MAX];
  float* output;            /* filled by the backend */
  uint64_t output_capacity; /* values output can hold */
  uint32_t output_rows;     /* set by the backend, also when it returns E_BUFFER_TOO_SMALL */
  uint32_t output_cols;
};

/* An opened driver instance; opaque to the caller. */
typedef struct kiln_driver kiln_driver;

struct kiln_chip_identity {
  uint32_t index;
  int32_t numa_node; /* -1 when unknown */
  uint64_t memory_bytes;
  char serial[KILN_DRIVER_SERIAL_MAX];
  char hardware_revision[KILN_DRIVER_REVISION_MAX];
  char pci_bus_id[KILN_DRIVER_PCI_BUS_ID_MAX]; /* "0000:3b:00.0" */
};

struct kiln_chip_telemetry {
  double temperature_c;
  double power_w;
  double clock_mhz;
  uint64_t memory_used_bytes;
  uint64_t ecc_corrected;   /* since the last reset */
  uint64_t ecc_uncorrected; /* since the last reset */
  uint32_t link_up;         /* 1 when every chip-to-chip link is up */
  uint32_t throttled;       /* 1 when clocks are reduced for thermal or power reasons */
};

/* What a backend drives, as backend_kind declares it. */
#define KILN_BACKEND_SIM 1u     /* a simulated chip */
#define KILN_BACKEND_CPU 2u     /* the CPU reference: kernels in host arithmetic, no chip */
#define KILN_BACKEND_SILICON 3u /* a real chip */

/* Why a chip's clocks are reduced: bits of kiln_chip_activity.throttle_reasons. */
#define KILN_THROTTLE_THERMAL 1u /* the chip is too hot */
#define KILN_THROTTLE_POWER 2u   /* the chip is at its power limit */

struct kiln_chip_activity {
  double utilization;        /* fraction of the last second its compute units were busy, 0 to 1 */
  uint32_t throttle_reasons; /* KILN_THROTTLE_* bits; 0 when the clocks are not reduced */
  uint32_t reserved;         /* 0 */
};

struct kiln_firmware_slots {
  uint32_t active_slot;   /* KILN_FIRMWARE_SLOT_A or _B; the other one is the standby */
  uint32_t previous_slot; /* slot active before the last activation, or _NONE */
  uint32_t slot_valid[2]; /* 1 when the slot holds a complete image */
  char slot_version[2][KILN_DRIVER_FIRMWARE_VERSION_MAX];
};

struct kiln_self_test_result {
  uint32_t kind;   /* KILN_SELF_TEST_* */
  uint32_t level;
  uint32_t passed; /* 1 when no functional error was found; figures are judged by the caller */
  uint32_t reserved;
  uint64_t errors_found;
  double duration_s;
  double memory_bandwidth_gb_per_s;       /* memory test, else 0 */
  double interconnect_bandwidth_gb_per_s; /* interconnect test, else 0 */
  double compute_tflop_per_s;             /* compute test, else 0 */
  char detail[KILN_DRIVER_DETAIL_MAX];    /* what was found, for people */
};

/* What a backend can do, as capabilities declares it: bits of kiln_driver_capabilities.operations. */
#define KILN_CAPABILITY_FIRMWARE_SLOTS 1u   /* firmware_slots answers: the chip has A/B firmware */
#define KILN_CAPABILITY_FIRMWARE_INSTALL 2u /* flash_standby, activate_standby, rollback_firmware */
#define KILN_CAPABILITY_RESET 4u            /* reset_chip */
#define KILN_CAPABILITY_BINDINGS 8u         /* bind_workload, unbind_workload, chip_binding */
#define KILN_CAPABILITY_SELF_TESTS 16u      /* run_self_test */

/* Which kiln_chip_telemetry fields are real readings: bits of telemetry_kinds. A field whose bit
 * is clear is unknown (its value means nothing), not a failure. */
#define KILN_TELEMETRY_TEMPERATURE 1u /* temperature_c */
#define KILN_TELEMETRY_POWER 2u       /* power_w */
#define KILN_TELEMETRY_CLOCK 4u       /* clock_mhz */
#define KILN_TELEMETRY_MEMORY 8u      /* memory_used_bytes */
#define KILN_TELEMETRY_ECC 16u        /* ecc_corrected, ecc_uncorrected */
#define KILN_TELEMETRY_LINK 32u       /* link_up */
#define KILN_TELEMETRY_THROTTLE 64u   /* throttled */

struct kiln_driver_capabilities {
  uint32_t operations;      /* KILN_CAPABILITY_* bits */
  uint32_t telemetry_kinds; /* KILN_TELEMETRY_* bits */
  uint32_t reserved[2];     /* 0 */
};

struct kiln_driver_api {
  uint32_t abi_version; /* equals the version requested from kiln_driver_entry */
  uint32_t table_size;  /* sizeof(struct kiln_driver_api) as the backend was built */

  /* Opens the backend with a backend-defined options string. On failure *out_handle stays
   * NULL and a message is written to error (if error_size > 0). */
  kiln_driver_status (*open)(const char* options, kiln_driver** out_handle, char* error,
                             uint32_t error_size);
  void (*close)(kiln_driver* handle);
  /* Why the most recent call on the handle failed; "" when it succeeded. Valid until the
   * next call on the handle. */
  const char* (*last_error)(const kiln_driver* handle);

  kiln_driver_status (*driver_version)(kiln_driver* handle, char* out, uint32_t out_size);
  kiln_driver_status (*chip_count)(kiln_driver* handle, uint32_t* out_count);
  kiln_driver_status (*chip_identity)(kiln_driver* handle, uint32_t chip,
                                      struct kiln_chip_identity* out);
  kiln_driver_status (*chip_telemetry)(kiln_driver* handle, uint32_t chip,
                                       struct kiln_chip_telemetry* out);
  /* Resets the chip: clears error counters. Refused with E_BUSY while a workload is bound. */
  kiln_driver_status (*reset_chip)(kiln_driver* handle, uint32_t chip);

  kiln_driver_status (*firmware_slots)(kiln_driver* handle, uint32_t chip,
                                       struct kiln_firmware_slots* out);
  /* Writes the image file to the standby slot and records its version. Overwriting the
   * previous slot removes the rollback target. */
  kiln_driver_status (*flash_standby)(kiln_driver* handle, uint32_t chip, const char* image_path,
                                      const char* version);
  /* Makes the standby slot active (the old active slot becomes previous) and resets the chip. */
  kiln_driver_status (*activate_standby)(kiln_driver* handle, uint32_t chip);
  /* Returns to the previous slot; afterwards there is no previous slot until the next
   * activation. */
  kiln_driver_status (*rollback_firmware)(kiln_driver* handle, uint32_t chip);

  /* Binds a running process to chips; a chip bound to another live process is E_BUSY.
   * Bindings of processes that have exited are dropped. */
  kiln_driver_status (*bind_workload)(kiln_driver* handle, int64_t pid, const uint32_t* chips,
                                      uint32_t chip_count);
  /* Unbinds the process from every chip; not an error when it holds none. */
  kiln_driver_status (*unbind_workload)(kiln_driver* handle, int64_t pid);
  /* The live process bound to the chip, or 0. */
  kiln_driver_status (*chip_binding)(kiln_driver* handle, uint32_t chip, int64_t* out_pid);

  kiln_driver_status (*run_self_test)(kiln_driver* handle, uint32_t chip, uint32_t kind,
                                      uint32_t level, struct kiln_self_test_result* out);

  /* Added after the first release of version 1, so a table whose table_size ends before it
   * lacks it (the loader then answers E_UNSUPPORTED). Runs one kernel on the chip; an output
   * buffer too small gives E_BUFFER_TOO_SMALL with output_rows and output_cols set. */
  kiln_driver_status (*run_kernel)(kiln_driver* handle, uint32_t chip,
                                   struct kiln_kernel_launch* launch);

  /* Added after run_kernel, likewise optional (a table whose table_size ends before it lacks it).
   * How busy the chip is and why its clocks are reduced, beside chip_telemetry's figures. */
  kiln_driver_status (*chip_activity)(kiln_driver* handle, uint32_t chip,
                                      struct kiln_chip_activity* out);

  /* Added after chip_activity, likewise optional. What the backend drives: KILN_BACKEND_SIM,
   * _CPU or _SILICON. kiln counts a node's results as silicon's only when its driver declares
   * it; a backend without this function is of no known kind. */
  kiln_driver_status (*backend_kind)(kiln_driver* handle, uint32_t* out_kind);

  /* Added after backend_kind, likewise optional. What the backend can do and which telemetry it
   * reads: the agent leaves the rest alone (a backend without firmware takes no firmware install).
   * A backend without this function can do everything, as every backend before it did. */
  kiln_driver_status (*capabilities)(kiln_driver* handle, struct kiln_driver_capabilities* out);
};

/* Returns the table for requested_abi_version, or NULL when the backend does not implement
 * that version. */
typedef const struct kiln_driver_api* (*kiln_driver_entry_fn)(uint32_t requested_abi_version);

KILN_DRIVER_EXPORT const struct kiln_driver_api* kiln_driver_entry(uint32_t requested_abi_version);

#ifdef __cplusplus
}
#endif

#endif /* KILN_DRIVER_H */
