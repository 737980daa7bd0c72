#pragma once
// One set of colours for every view of a report: the window, the PNG export and the HTML page. Colour-blind
// safe hues that read on light and dark backgrounds alike, as "#rrggbb".
#include "report/trace.h"

namespace memledger {

constexpr const char* ledgerColourHex(Ledger ledger)
{
    switch (ledger) {
    case Ledger::Weights:
        return "#4c72b0";
    case Ledger::Inputs:
        return "#8172b3";
    case Ledger::Activations:
        return "#55a868";
    case Ledger::SavedActivations:
        return "#2f7d4a"; // a darker green: the activations the backward still needs
    case Ledger::Temporaries:
        return "#dd8452";
    case Ledger::Gradients:
        return "#c44e8a";
    case Ledger::OptimizerState:
        return "#64b5cd";
    case Ledger::GatheredParameters:
        return "#8da0cb"; // a lighter weights blue: the weights of one unit, gathered from every rank
    case Ledger::Communication:
        return "#e5c494"; // sand: buffers of the collectives
    case Ledger::AutocastCache:
        return "#b3b3e6"; // a pale inputs violet: copies of the weights in the lower precision
    case Ledger::KvCache:
        return "#e3b505"; // gold, apart from the temporaries' orange: the keys and values generation keeps
    case Ledger::Resident:
        return "#a8a8a8"; // a snapshot's blocks alive before its trace: kAliveBeforeColourHex
    case Ledger::Unattributed:
        break;
    }
    return "#937860";
}

// CUDA snapshots and the allocator model.
constexpr const char* kAliveBeforeColourHex = "#a8a8a8"; // blocks alive before the trace began
constexpr const char* kPendingFreeColourHex = "#da8bc3"; // freed by the caller, not yet by the stream
constexpr const char* kReservedColourHex = "#2b5d8c"; // bytes the allocator holds in segments
constexpr const char* kFragmentationColourHex = "#c44e52"; // reserved but not allocated

} // namespace memledger
