"""The cost panel of the overview: cost so far, cost of waiting by cause, work at risk since the last checkpoint.

Receives an analysis and a cost breakdown (``update_from``) and owns nothing but its labels. Colors of the
waiting causes are the phase colors of ``ringscope.gui.core.phases`` (via ``theme``), the same as in every chart.
"""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from ringscope.gui.core.analysis.cost import PHASE_OF_CAUSE, WASTE_CAUSES, CostBreakdown
from ringscope.gui.core.analysis.summary import SessionAnalysis
from ringscope.gui.core.report.model import hours_text, money
from ringscope.gui.views import theme


class QtCostPanel(QtWidgets.QFrame):
    """Where the money goes: total, waiting by cause (colored like its phase), and what a crash would lose."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(2)
        title = QtWidgets.QLabel("Cost")
        title.setObjectName("cardTitle")
        self.total = QtWidgets.QLabel("no data")
        self.total.setObjectName("cardValue")
        self.price = QtWidgets.QLabel("")
        self.price.setObjectName("cardDetail")
        self.price.setWordWrap(True)
        layout.addWidget(title)
        layout.addWidget(self.total)
        layout.addWidget(self.price)
        grid = QtWidgets.QGridLayout()
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(1)
        self.waste: dict[str, QtWidgets.QLabel] = {}
        for row, (cause, label) in enumerate(WASTE_CAUSES.items()):
            swatch = QtWidgets.QLabel("■")
            swatch.setStyleSheet(f"color: {theme.PHASE_COLORS[PHASE_OF_CAUSE[cause]]};")
            swatch.setToolTip(theme.PHASE_DESCRIPTIONS[PHASE_OF_CAUSE[cause]])
            value = QtWidgets.QLabel("—")
            value.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight)
            self.waste[cause] = value
            grid.addWidget(swatch, row, 0)
            grid.addWidget(QtWidgets.QLabel(label), row, 1)
            grid.addWidget(value, row, 2)
        grid.setColumnStretch(1, 1)
        layout.addLayout(grid)
        self.at_risk = QtWidgets.QLabel("")
        self.at_risk.setObjectName("cardDetail")
        self.at_risk.setWordWrap(True)
        layout.addWidget(self.at_risk)
        layout.addStretch(1)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def show_pending(self, text: str) -> None:
        """No figures yet for what is shown now (another run was selected): say so, show no stale money."""
        self.total.setText("…")
        self.price.setText(text)
        for label in self.waste.values():
            label.setText("—")
        self.at_risk.setText("")

    def update_from(self, analysis: SessionAnalysis, cost: CostBreakdown) -> None:
        """Show the figures of one analysis (call from the GUI thread, at most a few times per second)."""
        if analysis.steps_total == 0:
            self.total.setText("no data")
            self.price.setText("no step received yet")
            for label in self.waste.values():
                label.setText("—")
            self.at_risk.setText("")
            return
        self.total.setText(f"{money(cost, cost.cost_total)} so far")
        waiting = (f"waiting: {money(cost, cost.waste_total)} ({cost.waste_share:.0%})" if cost.waste_measured
                   else "waiting: not measured (Keras fit)")
        self.price.setText(f"{cost.devices} × {cost.currency}{cost.price_per_gpu_hour:g} per {cost.unit[:-1]} "
                           f"({cost.price_source}); {waiting}")
        self.price.setToolTip(cost.assumption)
        for cause, label in self.waste.items():
            hours = hours_text(cost.waste_hours[cause])
            label.setText(f"{money(cost, cost.waste_cost[cause])}  ({hours} {cost.unit})" if cost.waste_measured
                          else "not measured")
        risk_hours = hours_text(cost.at_risk_hours)
        self.at_risk.setText(f"At risk: {money(cost, cost.at_risk_cost)} ({risk_hours} {cost.unit}, "
                             f"{cost.at_risk_reason})")

