// Owns the precompiled headers that kiln's other targets reuse (cmake/PrecompiledHeaders.cmake).
