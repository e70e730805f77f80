// The one explicit list of every architecture gpubench can run, in the 2020 post's order.
// Workloads (configs/models/*.yaml) select one of these by name; twins share code through
// configs.
#include "gpubench/train/registry.h"
#include "models/bert.h"
#include "models/bert_squad.h"
#include "models/deeplab.h"
#include "models/fconv.h"
#include "models/mask_rcnn.h"
#include "models/mtdnn.h"
#include "models/nasnet.h"
#include "models/pix2pixhd.h"
#include "models/stylegan.h"
#include "models/transformer.h"
#include "models/unsupmt.h"
#include "models/yolov3.h"

namespace gpubench {

void register_builtin_workloads(Registry& registry) {
  registry.add(models::nasnet_architecture());               // nasnet-large
  registry.add(models::deeplab_xception_architecture());     // deeplabv3
  registry.add(models::deeplab_resnet_architecture());       // deeplabv3-resnet101 (twin)
  registry.add(models::yolov3_architecture());               // yolov3
  registry.add(models::pix2pixhd_architecture());            // pix2pixhd
  registry.add(models::stylegan_architecture());             // stylegan
  registry.add(models::mask_rcnn_architecture());            // mask-rcnn
  registry.add(models::fairseq_transformer_architecture());  // transformer-big
  registry.add(models::fairseq_fconv_architecture());        // conv-seq2seq
  registry.add(models::unsupmt_architecture());              // unsupmt
  registry.add(models::bert_pretraining_architecture());     // bert-base, bert-base-mlm (twin)
  registry.add(models::bert_squad_architecture());           // bert-finetune
  registry.add(models::mtdnn_architecture());                // mt-dnn
}

}  // namespace gpubench
