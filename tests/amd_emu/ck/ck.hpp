#pragma once
// The CPU emulation: see emu.h.
#include "../emu.h"
