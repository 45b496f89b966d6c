// A fixture for the layering check (tests/CMakeLists.txt, layers.*): a plan/
// header that includes the simulator, a layer below it, which the check must
// reject. Never compiled.
#pragma once

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/sim/simulator.h"
