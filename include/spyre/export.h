/* SPDX-License-Identifier: Apache-2.0 */
/* What libspyre.so exports. The library is built with hidden visibility
 * (-fvisibility=hidden): a symbol leaves the .so only when it is declared
 * between SPYRE_API_BEGIN and SPYRE_API_END, which every installed header
 * (include/spyre/, except the hardware contract's uapi/) puts around its
 * declarations. The tier of a declaration is where it lives: an installed
 * header is public, a header under libspyre/ or driver/ is not.
 * docs/building.md says why, and how the list of exports is checked. */
#ifndef SPYRE_EXPORT_H
#define SPYRE_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define SPYRE_API __attribute__((visibility("default")))
/* On the forward declarations in installed headers of what is defined
 * inside the library (a pimpl's Impl, DeviceCore): kept out of the exports. */
#define SPYRE_INTERNAL __attribute__((visibility("hidden")))
#define SPYRE_API_BEGIN _Pragma("GCC visibility push(default)")
#define SPYRE_API_END _Pragma("GCC visibility pop")
#else
#define SPYRE_API
#define SPYRE_INTERNAL
#define SPYRE_API_BEGIN
#define SPYRE_API_END
#endif

#endif /* SPYRE_EXPORT_H */
