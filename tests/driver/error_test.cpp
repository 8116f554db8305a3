// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cerrno>

#include "spyre/error.hpp"
#include "spyre/uapi/spyre_errors.h"

using spyre::Error;
using spyre::ErrorKind;

TEST(Error, WhatCarriesKindMessageAndContext) {
    Error e(ErrorKind::DeviceError, "NOP failed",
            {.device = "0000:01:00.0", .reg = "ERR_CODE", .offset = 0x80, .op_index = 7,
             .device_code = SPYRE_ERR_RESERVED_NONZERO});
    std::string w = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::DeviceError);
    EXPECT_EQ(e.message(), "NOP failed");
    for (const char* part : {"device error", "NOP failed", "device 0000:01:00.0", "register ERR_CODE", "offset 0x80",
                             "op 7", "RESERVED_NONZERO"})
        EXPECT_NE(w.find(part), std::string::npos) << part << " missing in: " << w;
}

TEST(Error, SystemErrorMapsErrnoToKind) {
    errno = EBUSY;
    EXPECT_EQ(spyre::SystemError("open").kind(), ErrorKind::Busy);
    errno = ENOENT;
    Error e = spyre::SystemError("open /x");
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
    EXPECT_EQ(e.context().sys_errno, ENOENT);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos);
    errno = ENOTCONN;
    EXPECT_EQ(spyre::SystemError("read").kind(), ErrorKind::DeviceLost);
}
