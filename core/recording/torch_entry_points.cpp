// The libtorch part's one export (torch_library.h): the table core's Model and availableDevices() call through.
#include "recording/cuda_session.h"
#include "recording/model_impl.h"
#include "recording/torch_library.h"

extern "C" __attribute__((visibility("default"))) const memledger::TorchEntryPoints* memledger_torch_entry_points()
{
    using namespace memledger;
    static const TorchEntryPoints table = [] {
        TorchEntryPoints t;
        t.open = &openModel;
        t.openBytes = &openModelBytes;
        t.destroy = [](Model::Impl* d) { delete d; };
        t.info = [](const Model::Impl& d) -> const ModelInfo& { return d.info; };
        t.metaWeights = [](const Model::Impl& d) { return d.program && d.program->metaWeights(); };
        t.modules = [](const Model::Impl& d) -> const std::vector<LayerStats>& { return d.modules; };
        t.guessInputs = &guessModelInputs;
        t.run = &runModel;
        t.cudaDevices = &cudaDevices;
        return t;
    }();
    return &table;
}
