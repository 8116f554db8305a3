/* SPDX-License-Identifier: Apache-2.0 */
/* spyre hardware contract: everything mockdev and the driver must agree on. */
#ifndef SPYRE_UAPI_SPYRE_H
#define SPYRE_UAPI_SPYRE_H
#include "spyre_pci.h"
#include "spyre_regs.h"
#include "spyre_cb.h"
#include "spyre_errors.h"
#include "spyre_ioctl.h"
#include "spyre_program.h"
#include "spyre_task.h"
#endif
